-- The archive: each message that left a conversation's verbatim history, as the commit that took it out archived it
-- (its record is that commit's). A reset with forget, the player's reset phrase and a delete erase them.
CREATE TABLE archived_messages (
    record_id text NOT NULL REFERENCES records ON DELETE CASCADE,
    seq integer NOT NULL,
    conversation_id text NOT NULL,
    message_id text NOT NULL,
    speaker text NOT NULL CHECK (speaker IN ('player', 'assistant', 'operator', 'game', 'tool')),
    text text NOT NULL,
    at timestamptz,
    PRIMARY KEY (record_id, seq)
);
CREATE INDEX archived_messages_conversation ON archived_messages (conversation_id);
