"""How a worker drains a conversation: its lease and retries, and a player's bursts answered by one turn."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from worker.settings.group import GROUP_CONFIG, Group


class Drain(Group):
    """How a worker holds a conversation and retries its inputs."""

    heading: ClassVar[str] = "The drain: leases, retries, fairness"
    lease_seconds: float = Field(default=10.0, description="How long a conversation (or its delivery) stays owned by a "
                                 "worker that stopped renewing it. A running turn renews it every third of this, "
                                 "so it bounds how soon a dead worker's conversations are taken over.")
    max_attempts: int = Field(default=5, description="Attempts at one input that end in a crash before it is dead-lettered "
                                             "(poison input).")
    max_model_retries: int = Field(default=30, description="Retries of one input while the model is unavailable (backoff up "
                                                   "to a minute) before it is dead-lettered.")
    max_bad_response_retries: int = Field(default=3, description="Retries of one input whose model answer could not be read "
                                          "(a malformed body) before it is dead-lettered, counted apart from its "
                                          "retries while the model is unavailable.")
    max_retry_delay: float = Field(default=60.0, description="Longest wait between retries of an input while the model is "
                                                     "unavailable.")
    max_turns: int = Field(default=100, ge=0, validation_alias="drain_max_turns", description="Inputs one drain applies "
                           "before it hands the conversation back to the queue (behind the other conversations' "
                           "wake-ups), so a flooding conversation or game engine cannot hold a worker slot while "
                           "quiet conversations wait. 0 = no bound.")
    max_seconds: float = Field(default=1.0, ge=0, validation_alias="drain_max_seconds", description="Seconds one drain "
                               "applies inputs before it hands the conversation back to the queue (checked after "
                               "each commit, so a long turn finishes first). 0 = no bound.")
    dead_letter_reply: str = Field(default="Sorry, something went wrong on my side and I couldn't answer that message. "
                                   "Please try again.", description="Apology sent when a player's message is "
                                   "dead-lettered (it stays replayable); empty = none.")
    sweep_interval: float = Field(default=5.0, description="How often the sweeper looks for stranded conversations (waiting "
                                  "inputs or replies whose worker's lease ran out), in seconds; it wakes those idle "
                                  "this long or more.")

    timer_poll_seconds: float = Field(default=0.2, gt=0, description="How often each worker process looks for "
                                      "timers that came due (inputs sent with `at=`): a timer fires this late at "
                                      "most, plus the time to fire those before it.")

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def sweep_ms(self) -> int:
        return int(self.sweep_interval * 1000)


@dataclass(frozen=True, config=GROUP_CONFIG)
class Burst:
    """A player's burst of messages answered by one turn (``PARLEY_BURST_*``, ``PARLEY_DOUBLE_TEXT*``); the drain's
    :mod:`worker.service.drain.burst` reads it as its policy. ``quiet_seconds`` 0 turns coalescing off."""

    heading: ClassVar[str] = "Players' bursts"
    quiet_seconds: float = Field(default=1.5, ge=0, validation_alias="burst_quiet_seconds", description="Chat messages of one "
                                 "conversation that arrive within this quiet period are answered by one turn that "
                                 "sees each of them, in order (the reply threads to the last). 0 = off: one turn and "
                                 "one reply per message.")
    max_wait_seconds: float = Field(default=8.0, ge=0, validation_alias="burst_max_wait_seconds", description="Longest a "
                                    "burst waits from its first message: a player who keeps typing still gets "
                                    "answers.")
    max_messages: int = Field(default=20, ge=1, validation_alias="burst_max_messages",
                              description="Most inputs one burst turn takes in.")
    double_text: Literal["queue", "merge"] = Field(default="queue", description="Chat messages that arrive while the model "
                                                   "answers: queue = answered in order by the next turn; merge = the "
                                                   "stale answer is not sent and the turn runs again with them.")
    double_text_max_merges: int = Field(default=2, ge=0, description="With merge: most re-runs of one turn; after that the "
                                        "answer goes out.")
    # Not a setting: the model reads pictures (and they can be fetched), so a bare photo can join a burst.
    reads_images: bool = Field(default=False, exclude=True)

    @property
    def quiet(self) -> float:
        return self.quiet_seconds

    @property
    def max_wait(self) -> float:
        return self.max_wait_seconds

    @property
    def merge(self) -> bool:
        return self.double_text == "merge"

    @property
    def max_merges(self) -> int:
        return self.double_text_max_merges

    @property
    def peek(self) -> int:
        """How many inputs after the head the drain needs to see to decide: enough to fill a burst."""
        return self.max_messages - 1 if self.quiet_seconds > 0 or self.merge else 0
