-- dsv catalog, schema 1. Ids are 32-byte BLAKE3 hashes stored as BLOBs; times are Unix
-- seconds unless a column name ends in _ns (nanoseconds); sizes are bytes.

-- Pack files under .dsv/packs/<pack_id hex>.pack, each durably written before it is named here.
CREATE TABLE packs (
    id          INTEGER PRIMARY KEY,
    pack_id     BLOB    NOT NULL UNIQUE,
    size        INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

-- Frames: runs of objects stored together (compressed or raw) inside a pack.
CREATE TABLE frames (
    id             INTEGER PRIMARY KEY,
    pack           INTEGER NOT NULL REFERENCES packs(id),
    offset         INTEGER NOT NULL,
    stored_length  INTEGER NOT NULL,
    raw_length     INTEGER NOT NULL,
    compression    INTEGER NOT NULL      -- 0 none, 1 zstd
);
CREATE INDEX frames_by_pack ON frames(pack);

-- Every object's location: chunks, file maps (keyed by file id), trees, versions.
CREATE TABLE objects (
    id      BLOB    PRIMARY KEY,
    kind    INTEGER NOT NULL,            -- 1 chunk, 2 tree, 3 version, 4 file map
    frame   INTEGER NOT NULL REFERENCES frames(id),
    offset  INTEGER NOT NULL,            -- within the frame's raw bytes
    length  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE datasets (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    head        BLOB    REFERENCES versions(id),
    created_at  INTEGER NOT NULL
);

-- Versions, denormalized from their objects for fast log/show queries.
CREATE TABLE versions (
    id          BLOB    PRIMARY KEY,
    dataset     INTEGER NOT NULL REFERENCES datasets(id),
    parent      BLOB,
    tree        BLOB    NOT NULL,
    author      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    file_count  INTEGER NOT NULL,
    byte_count  INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    message     TEXT    NOT NULL
) WITHOUT ROWID;
CREATE INDEX versions_by_dataset ON versions(dataset);

CREATE TABLE tags (
    dataset     INTEGER NOT NULL REFERENCES datasets(id),
    name        TEXT    NOT NULL,
    version     BLOB    NOT NULL REFERENCES versions(id),
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (dataset, name)
) WITHOUT ROWID;

-- Directories this store committed or checked out, and which version each holds.
CREATE TABLE workspaces (
    id          INTEGER PRIMARY KEY,
    path        TEXT    NOT NULL UNIQUE, -- absolute, canonical
    dataset     INTEGER REFERENCES datasets(id),
    version     BLOB    REFERENCES versions(id),
    updated_at  INTEGER NOT NULL
);

-- The stat cache: what a workspace file looked like when its content was last hashed.
-- An entry is trusted only when the file's stat still matches and the file's mtime is older
-- than checked_ns by a safety margin (see workspace.rs: "racy" entries are re-hashed).
CREATE TABLE stat_cache (
    workspace   INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    path        TEXT    NOT NULL,        -- relative, '/'-separated
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    inode       INTEGER NOT NULL,
    mode        INTEGER NOT NULL,
    file_id     BLOB    NOT NULL,
    checked_ns  INTEGER NOT NULL,
    PRIMARY KEY (workspace, path)
) WITHOUT ROWID;
