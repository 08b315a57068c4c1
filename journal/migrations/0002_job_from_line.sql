-- A replay job may start at a line: a Hermes process's own divert file
-- (<home>/sessions/<id>.jsonl) is replayed only from the lines appended
-- while an incident was open; the lines before it are old transcripts. The
-- recovery ids still chain over the whole file, so they equal Hermes' own.
ALTER TABLE replay_jobs ADD COLUMN from_line INTEGER NOT NULL DEFAULT 0;
