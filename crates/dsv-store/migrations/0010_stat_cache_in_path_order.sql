-- Schema 10: the stat cache is keyed in path order. `key` is the relative path with every
-- '/' written as a 0 byte (no name holds one), so SQLite's byte order of keys (memcmp) is
-- dsv's path order: depth first, siblings sorted by name bytes (see `walk::path_order`).
-- Status, commit and checkout then read a workspace's cache with one cursor, in step with
-- the walk, instead of loading it into memory. The hook that runs after this SQL moves the
-- rows, re-keyed, and replaces the old table with this one.
CREATE TABLE stat_cache_keyed (
    workspace   INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    key         BLOB    NOT NULL,        -- relative path, '/' written as 0x00
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    inode       INTEGER NOT NULL,
    mode        INTEGER NOT NULL,
    file_id     BLOB    NOT NULL,
    checked_ns  INTEGER NOT NULL,
    PRIMARY KEY (workspace, key)
) WITHOUT ROWID;
