-- Schema 5: the local cache. last_used is when a version was last committed or checked out
-- here (least-recently-used eviction); evicted_at is when `dsv cache prune` let its chunks go
-- because a remote holds them all (its version object, trees and file maps stay, so a
-- checkout knows what to fetch back).
ALTER TABLE versions ADD COLUMN last_used INTEGER;   -- Unix seconds; NULL = its created_at
ALTER TABLE versions ADD COLUMN evicted_at INTEGER;  -- Unix seconds; NULL = data kept here
