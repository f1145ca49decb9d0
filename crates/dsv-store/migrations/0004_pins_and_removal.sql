-- Schema 4: what may be collected. `dsv rm` marks versions removed (their version objects
-- and rows stay, so the log still shows them); `dsv gc` deletes every chunk, file map and
-- tree that no remaining version reaches. Pinned versions cannot be removed.
ALTER TABLE versions ADD COLUMN removed_at INTEGER;  -- Unix seconds; NULL = live

CREATE TABLE pins (
    version     BLOB    PRIMARY KEY REFERENCES versions(id),
    reason      TEXT    NOT NULL,
    until       INTEGER,                 -- Unix seconds; NULL = until unpinned
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;
