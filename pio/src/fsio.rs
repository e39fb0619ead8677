//! The POSIX calls pio times, and the cache controls around them. Kept in one
//! module so every `unsafe` FFI call (close, posix_fadvise, fallocate) sits
//! next to its justification.
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{PioError, Result};

/// Alignment used for O_DIRECT buffers, offsets and lengths.
pub const DIRECT_ALIGN: usize = 4096;

/// Current time as Unix epoch seconds (the real-time clock, like IOR's
/// gettimeofday; comparable across processes of one host and across
/// synchronized hosts).
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A heap buffer whose usable part starts at a 4 KiB boundary (O_DIRECT).
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` usable bytes.
    pub fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        AlignedBuf { raw, start, len }
    }
    /// The first `n` usable bytes.
    pub fn get_mut(&mut self, n: usize) -> &mut [u8] {
        let n = n.min(self.len);
        self.raw
            .get_mut(self.start..self.start + n)
            .unwrap_or_default()
    }
}

/// Opens a file for the write phase (created if missing, never truncated: a
/// shared file is opened by every client at once).
pub fn open_write(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map_err(|e| PioError::io("open for write", path, e))
}

/// Opens a file for the read phase, with O_DIRECT if asked.
pub fn open_read(path: &Path, direct: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// Closes `f`, reporting the error `close(2)` returns (network file systems
/// report deferred write errors there; dropping a `File` would hide it).
pub fn close(f: File, path: &Path) -> Result<()> {
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was just released by `into_raw_fd`, so it is open and owned
    // here, and it is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(PioError::io("close", path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether O_DIRECT works in the directory of `path` (tmpfs and some FUSE
/// file systems refuse it with EINVAL).
pub fn direct_supported(path: &Path, tag: &str) -> bool {
    let mut probe = path.as_os_str().to_owned();
    probe.push(format!(".pio-direct-probe-{tag}"));
    let probe = std::path::PathBuf::from(probe);
    let r = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let ok = r.is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// Writes back and evicts the cached pages of `path` (fdatasync +
/// posix_fadvise DONTNEED): any user may do it, and it affects only this file.
pub fn evict(path: &Path) -> Result<()> {
    let f = File::open(path).map_err(|e| PioError::io("open for evict", path, e))?;
    f.sync_data()
        .map_err(|e| PioError::io("fdatasync", path, e))?;
    // SAFETY: the descriptor belongs to `f`, which is alive for the call;
    // posix_fadvise only reads its arguments.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(PioError::io(
            "posix_fadvise",
            path,
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

/// Drops the whole page cache of this host (`sync; echo 3 > drop_caches`).
/// Needs root; affects every process on the host, so it is opt-in.
pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| PioError::io("write", "/proc/sys/vm/drop_caches", e))
}

/// Allocates `len` bytes of `path` (the "preallocated space" variant of the
/// sustained write test).
pub fn preallocate(path: &Path, len: u64) -> Result<()> {
    let f = open_write(path)?;
    let len = libc::off_t::try_from(len).map_err(|_| PioError::param("file size", "too large"))?;
    // SAFETY: the descriptor belongs to `f`, alive for the call.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) };
    if rc != 0 {
        return Err(PioError::io(
            "posix_fallocate",
            path,
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    f.sync_all().map_err(|e| PioError::io("fsync", path, e))?;
    close(f, path)
}

/// Flips one byte of `path` at `offset` (testing aid: a known corruption).
pub fn corrupt(path: &Path, offset: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| PioError::io("open for corruption", path, e))?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset)
        .map_err(|e| PioError::io("read", path, e))?;
    b[0] ^= 0xFF;
    f.write_all_at(&b, offset)
        .map_err(|e| PioError::io("write", path, e))?;
    f.sync_all().map_err(|e| PioError::io("fsync", path, e))?;
    close(f, path)
}
