-- Schema 3: remotes. What this store knows about each remote (object storage holding packs
-- and refs, see docs/format.md "Remote layout"): its URL and non-secret options, the refs as
-- last fetched (with the ETag and Last-Modified that make the local copy checkable by one HEAD
-- request), and the indexes of the remote's packs, so a pull knows which byte ranges to fetch.
-- Credentials are never stored here.
CREATE TABLE remotes (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    url         TEXT    NOT NULL,
    options     TEXT    NOT NULL,        -- JSON object of non-secret settings
    created_at  INTEGER NOT NULL
);

-- A remote's refs as last fetched or pushed. tag '' is the dataset's head.
CREATE TABLE remote_refs (
    remote          INTEGER NOT NULL REFERENCES remotes(id) ON DELETE CASCADE,
    dataset         TEXT    NOT NULL,
    tag             TEXT    NOT NULL,
    version         BLOB    NOT NULL,
    etag            TEXT,
    object_version  TEXT,                -- the backend's object version, when it has one
    last_modified   INTEGER NOT NULL,    -- Unix seconds, as the remote reported
    fetched_at      INTEGER NOT NULL,
    PRIMARY KEY (remote, dataset, tag)
) WITHOUT ROWID;

-- Packs known to exist on a remote, with their indexes below.
CREATE TABLE remote_packs (
    id          INTEGER PRIMARY KEY,
    remote      INTEGER NOT NULL REFERENCES remotes(id) ON DELETE CASCADE,
    pack_id     BLOB    NOT NULL,
    size        INTEGER NOT NULL,
    UNIQUE (remote, pack_id)
);

CREATE TABLE remote_frames (
    id             INTEGER PRIMARY KEY,
    pack           INTEGER NOT NULL REFERENCES remote_packs(id) ON DELETE CASCADE,
    offset         INTEGER NOT NULL,
    stored_length  INTEGER NOT NULL,
    raw_length     INTEGER NOT NULL,
    compression    INTEGER NOT NULL
);
CREATE INDEX remote_frames_by_pack ON remote_frames(pack);

CREATE TABLE remote_objects (
    remote  INTEGER NOT NULL REFERENCES remotes(id) ON DELETE CASCADE,
    id      BLOB    NOT NULL,
    kind    INTEGER NOT NULL,
    frame   INTEGER NOT NULL REFERENCES remote_frames(id) ON DELETE CASCADE,
    offset  INTEGER NOT NULL,
    length  INTEGER NOT NULL,
    PRIMARY KEY (remote, id, kind)
) WITHOUT ROWID;
CREATE INDEX remote_objects_by_frame ON remote_objects(frame);
