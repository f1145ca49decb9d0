-- Schema 14: delta frames (pack index 2). A frame stored as a delta (compression 2) is one
-- zstd frame compressed against a reference prefix: the raw bytes of its base chunks, end to
-- end. `bases` lists them: the 32-byte chunk ids concatenated in prefix order (1 to 8 of
-- them); NULL for every other frame, so every existing row stays as it was. A dsv before
-- this schema refuses to open the store ("made by a newer dsv") before reading anything.
ALTER TABLE frames ADD COLUMN bases BLOB;
ALTER TABLE remote_frames ADD COLUMN bases BLOB;
