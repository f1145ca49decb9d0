-- Schema 11: a stat cache entry no longer names a file id. An entry at a path vouches that the
-- file there, while its lstat is unchanged, holds the content of the workspace's version's
-- file at that path (the version the workspace record names). Readers take the id from that
-- version's tree, walked in step with the directory, and no longer look each entry's id up in
-- `objects`: a workspace's version is kept whole while its directory exists, and the entries
-- of a workspace whose version was removed or evicted are dropped and never read.
-- `checked_ns` goes too: an entry whose stat was taken within the racy margin of its mtime
-- was never trusted, so such an entry is no longer written at all.
-- A row is then the path key, five stat fields and the workspace: about 50 bytes instead of
-- about 105. The old rows cannot be checked against their versions here (the trees are in the
-- packs), so they are dropped: the first status or commit of each workspace after the upgrade
-- hashes its files once.
CREATE TABLE stat_cache_vouching (
    workspace   INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    key         BLOB    NOT NULL,        -- relative path, '/' written as 0x00 (schema 10)
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    inode       INTEGER NOT NULL,
    mode        INTEGER NOT NULL,
    PRIMARY KEY (workspace, key)
) WITHOUT ROWID;
DROP TABLE stat_cache;
ALTER TABLE stat_cache_vouching RENAME TO stat_cache;
