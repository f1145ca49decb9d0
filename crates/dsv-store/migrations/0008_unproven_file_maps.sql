-- Schema 8: file maps not yet proven. A file map is keyed by its file's id, not by the hash
-- of its own bytes, so one fetched from a remote could list the wrong chunks (a hostile or
-- broken remote). Until its chunks have been reassembled and hashed to the file id once,
-- it is listed here with the remote it came from; the first read proves it (and drops the
-- row) or rejects it (and drops the map, so the right one can be fetched again).
CREATE TABLE unproven_file_maps (
    id      BLOB    PRIMARY KEY,
    remote  TEXT    NOT NULL
) WITHOUT ROWID;
