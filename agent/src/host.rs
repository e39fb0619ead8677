//! Facts about the host the agent runs on (sent at registration).

/// The host name (kernel's node name): [`benchlake_core::node::hostname`].
pub use benchlake_core::node::hostname;

/// Online CPU cores available to this process.
pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// Physical memory in bytes (MemTotal of /proc/meminfo), 0 when unknown.
pub fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}
