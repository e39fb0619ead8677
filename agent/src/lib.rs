//! The agent: registration, heartbeat, benchmark catalog and runners, raw-output upload.
