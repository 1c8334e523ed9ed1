-- Issue 30, estimates (docs/AUDIENCES.md "Estimates"): user_tag's value indexes gain the tag's kind
-- after its key, so the set of a service's users whose tag matches a predicate ("plan = pro",
-- "score >= 90") is read from the index alone. Before, each entry's kind was read from the table
-- (a lookup on the primary key per entry: at 1,000,000 users with a buffer pool smaller than the
-- tables, most estimate time went there), and MariaDB intersected ix_user_tag_str with the primary
-- key's range of the whole service. (Numbered 0029: 0027 and 0028 are taken by other branches of
-- issue 30's work.)
ALTER TABLE user_tag
  DROP INDEX IF EXISTS ix_user_tag_str,
  DROP INDEX IF EXISTS ix_user_tag_num,
  -- serves: estimates and segment counts driven by a predicate on a string tag (a covering range)
  ADD INDEX ix_user_tag_str (service, tag_key, kind, value_str),
  -- serves: the same for number, boolean and timestamp tags
  ADD INDEX ix_user_tag_num (service, tag_key, kind, value_num);
