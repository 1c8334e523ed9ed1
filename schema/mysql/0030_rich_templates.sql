-- Rich pushes (issue 34, docs/PAYLOADS.md): a template's payload fields beyond title, body and data
-- (kind alert/background, image, sound, badge, click action, link, category, collapse key, analytics
-- label, the Android and iOS fields and the raw per-platform override), one JSON object checked by
-- notee/domain/payloads.py; NULL: a plain push, as before. Jobs store the rendered copy in their
-- payload, so workers never read this column.
-- retention: lives as long as its template.
ALTER TABLE notification_template
  ADD COLUMN IF NOT EXISTS payload JSON NULL AFTER variants;
