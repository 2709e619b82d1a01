"""The wire format of a conversation state: its constants, and how a blob is laid out.

``b"PLY"`` + one format byte + one flags byte + the rest. Since version 4 the rest is a four-byte big-endian length,
the *base* (a msgpack map of the whole state, zstd-compressed when the flag says so: bases over ``COMPRESS_OVER``
bytes), then any number of *frames*: msgpack maps, uncompressed, each what one write added (the new messages, the
counters, usage, the metadata but the epoch and start, and the facts when they changed). A turn that only grows the
history appends one frame, so the store writes only the frame (Redis ``RPUSH``); a compaction, a reset or anything
else that rewrites the past writes the state whole, as a new base with no frames. Since version 5 the frames may
also be *runs*: once the loose frames (those after the base or the last run) reach :data:`FOLD_AT` bytes, the write
that would append one more replaces them and it with one msgpack ``bin``, the zstd of those frames: a bounded write,
and the history takes what it compresses to in Redis (both in :mod:`~worker.conversation.state_encode`).

Before version 4 the rest was the base alone. The format byte is the schema version;
:data:`~worker.conversation.state_decode.MIGRATIONS` upgrades every older version step by step (each only added
optional fields: version 2 photos, a user message's media reference; version 3 keyed facts, ``facts``: the game's
facts that replace, see :class:`~worker.conversation.state_model.Fact`; version 4 the frames; version 5
``preamble_facts``, the facts as the preamble shows them, and the runs; version 6 each message's time, ``t``), and
golden blobs of each version pin that they keep decoding. A release refuses a state of a newer version
(``StateDecodeError("version")``) instead of misreading it, so a new version is read before it is written: the
writer takes the version to write (:data:`WRITABLE_VERSIONS`; the worker's ``PARLEY_STATE_FORMAT``), the previous
version until every process reads the new one. A blob of another version than the one written is written whole by
its next write, then appended to. Decoding is bounded (size, nesting, lengths, decompressed size) and never trusts a
declared length.
"""

from __future__ import annotations

import struct

MAGIC = b"PLY"
FORMAT_VERSION = 6
MEDIA_VERSION = 2  # the first version with media references
FACTS_VERSION = 3  # the first version with keyed facts
LOG_VERSION = 4  # the first version of a base then appended frames
PREAMBLE_FACTS_VERSION = 5  # the first version with the facts as of the preamble's last rewrite
FOLD_VERSION = 5  # the first version whose frames may be folded into compressed runs
TIMES_VERSION = 6  # the first version with each message's time
#: The versions a writer may write: the newest, and the one before it for a fleet that still runs a release that
#: reads no newer (a state of a version it does not know, a worker sets aside).
WRITABLE_VERSIONS = (FOLD_VERSION, TIMES_VERSION)
FOLD_AT = 4096  # uncompressed frames past this many bytes are folded into one compressed run
BASE_LEN = struct.Struct(">I")
FLAG_ZSTD = 0x01
COMPRESS_OVER = 4096
DEFAULT_MAX_STATE_BYTES = 1 << 20  # 1 MiB encoded
