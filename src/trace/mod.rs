//! Trace format v1 (JSON Lines): record types, a streaming reader, a writer.

pub mod record;
