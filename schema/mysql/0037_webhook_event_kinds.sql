-- webhook_delivery.event_type is checked by the code (notee/core/vocabulary.py WEBHOOK_EVENTS, and
-- notee/store/webhooks_sql.py refuses any other type before it writes), not by a CHECK constraint:
-- engagement webhooks (issue 36, docs/WEBHOOKS.md "Engagement events") add the receipt.* types, and
-- widening the CHECK would copy the table (holding every outbox write meanwhile), while dropping it
-- is instant (docs/DEPLOY.md "Online safety, measured").
ALTER TABLE webhook_delivery DROP CONSTRAINT IF EXISTS ck_webhook_delivery_type;
