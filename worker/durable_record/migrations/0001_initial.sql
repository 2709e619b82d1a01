-- The durable record: every commit, delivery, status and delete Parley appended to its record streams.
-- records: one row per stream entry (the unique record id makes a replayed export change nothing); its place in
-- the stream (Redis's clock) orders a conversation's records, whatever host's clock built them.
CREATE TABLE conversations (
    conversation_id text PRIMARY KEY,
    first_at timestamptz NOT NULL,
    last_at timestamptz NOT NULL
);

CREATE TABLE records (
    record_id text PRIMARY KEY,
    conversation_id text NOT NULL,
    stream_ms bigint NOT NULL,
    stream_seq bigint NOT NULL,
    at timestamptz NOT NULL,
    kind text NOT NULL,
    body jsonb NOT NULL
);
CREATE INDEX records_conversation_position ON records (conversation_id, stream_ms, stream_seq);
CREATE INDEX records_at ON records (at);

-- What was said, in order: the player's messages, the game's events, tool calls and the replies' parts.
CREATE TABLE messages (
    record_id text NOT NULL REFERENCES records ON DELETE CASCADE,
    seq integer NOT NULL,
    conversation_id text NOT NULL,
    at timestamptz NOT NULL,
    role text NOT NULL CHECK (role IN ('player', 'event', 'tool', 'assistant')),
    input_id text,
    reply_id text,
    part integer,
    text text NOT NULL DEFAULT '',
    tool text,
    tool_arguments text,
    tool_result text,
    tool_ms double precision,
    PRIMARY KEY (record_id, seq)
);
CREATE INDEX messages_conversation_at ON messages (conversation_id, at);
CREATE INDEX messages_reply ON messages (conversation_id, reply_id) WHERE reply_id IS NOT NULL;

-- What turns cost: one row per chat turn, tokens over all its model rounds.
CREATE TABLE usage (
    record_id text PRIMARY KEY REFERENCES records ON DELETE CASCADE,
    conversation_id text NOT NULL,
    at timestamptz NOT NULL,
    day date NOT NULL,
    model text NOT NULL,
    prompt_tokens integer NOT NULL,
    completion_tokens integer NOT NULL,
    cached_tokens integer NOT NULL,
    cache_write_tokens integer NOT NULL
);
CREATE INDEX usage_day_conversation ON usage (day, conversation_id);
CREATE INDEX usage_conversation_day ON usage (conversation_id, day);
