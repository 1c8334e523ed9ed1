-- Localized templates (issue 18 item 5, docs/API.md "Localized templates").
-- A template may hold variants per locale: {"de": {"title", "body", "data"?}, "pt-BR": {...}}, keys
-- canonical BCP 47 tags (language[-Script][-REGION]); a variant's data merges over the template's,
-- its defaults, ttl and priority are the template's. NULL: no variants (every recipient gets the
-- template's own title and body).
-- retention: lives as long as its template.
ALTER TABLE notification_template
  ADD COLUMN IF NOT EXISTS variants JSON NULL AFTER defaults;

-- The locale of a user, and of one of its devices (a device's wins over its user's), a canonical
-- BCP 47 tag; NULL: none (the template's default text). Read per fan-out page (one query) only by
-- jobs whose template has variants.
-- retention: lives as long as its user / device row.
ALTER TABLE `user`
  ADD COLUMN IF NOT EXISTS locale VARCHAR(35) CHARACTER SET ascii NULL AFTER service_user_name;
ALTER TABLE device
  ADD COLUMN IF NOT EXISTS locale VARCHAR(35) CHARACTER SET ascii NULL AFTER region;
