-- Schema 9: a workspace record follows the directory it describes. `device`, `inode` and
-- `born_ns` identify the directory (st_dev, st_ino and birth time of its root; filesystems
-- reuse inode numbers at once, so the birth time tells a new directory from the old) when it
-- was last committed or checked out; a different directory later made at the same path is
-- not that workspace (its record and stat cache are not used). NULL for records made before
-- this schema: trusted by path. born_ns is NULL where the filesystem keeps no birth time.
ALTER TABLE workspaces ADD COLUMN device INTEGER;
ALTER TABLE workspaces ADD COLUMN inode INTEGER;
ALTER TABLE workspaces ADD COLUMN born_ns INTEGER;
