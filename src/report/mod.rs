//! Turning engine findings into text, JSON and SARIF reports.
