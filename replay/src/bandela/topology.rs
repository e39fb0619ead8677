//! Host type 1: a topology plug-in gives the bandwidth of every receive transfer.
//!
//! The interface is the manual's four C functions over `bandela_item` arrays
//! (`numaflex_start`, `numaflex_end`, `compute_bandwidth_for_arrival`,
//! `compute_bandwidth_for_departure`), offered twice: as the Rust trait [`Topology`]
//! and as a C shared library loaded at run time ([`CPlugin`], `dlopen`). Bandwidths are
//! in MB/s (10^6 B), like the input's. The array passed to `…_for_arrival` holds the
//! `nb_live` running transfers followed by one slot for the new one (index `nb_live`,
//! 0-based: the manual writes `interface_array[nb_live+1]`, we read it as "the entry
//! after the live ones").
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;

use crate::error::{ReplayError, Result};

/// The manual's `bandela_item`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BandelaItem {
    /// Bandela internal usage.
    pub func: c_int,
    /// Receiving rank.
    pub receiver: c_int,
    /// Sending rank.
    pub sender: c_int,
    /// Bandwidth before the update.
    pub old_bandwidth: f64,
    /// Bandwidth after the update.
    pub new_bandwidth: f64,
    /// Owned by the plug-in; Bandela keeps it with the transfer.
    pub convenience: *mut c_void,
}

/// A host model computing receive bandwidths (host type 1).
pub trait Topology {
    /// Start of the replay.
    fn start(&mut self, nprocs: i32, buffered_bandwidth: f64);
    /// End of the replay at `real_time` (s).
    fn end(&mut self, real_time: f64);
    /// A new transfer (`receiver` reads `req_size` bytes from `sender`) starts; `live`
    /// holds the running transfers and, last, the new one. Returns the new transfer's
    /// bandwidth and may update the others' `new_bandwidth`.
    fn arrival(
        &mut self,
        real_time: f64,
        receiver: i32,
        sender: i32,
        req_size: i32,
        live: &mut [BandelaItem],
    ) -> f64;
    /// A transfer completed; `live` holds the ones still running.
    fn departure(&mut self, real_time: f64, receiver: i32, sender: i32, live: &mut [BandelaItem]);
}

#[link(name = "c")]
unsafe extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlclose(handle: *mut c_void) -> c_int;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;

type StartFn = unsafe extern "C" fn(c_int, f64);
type EndFn = unsafe extern "C" fn(f64);
type ArrivalFn = unsafe extern "C" fn(f64, c_int, c_int, c_int, c_int, *mut BandelaItem) -> f64;
type DepartureFn = unsafe extern "C" fn(f64, c_int, c_int, c_int, *mut BandelaItem);

/// A topology plug-in loaded from a C shared library (`libtopo.so`).
pub struct CPlugin {
    handle: *mut c_void,
    start: StartFn,
    end: EndFn,
    arrival: ArrivalFn,
    departure: DepartureFn,
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let p = unsafe { dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl CPlugin {
    /// Loads the library at `path` and resolves the four functions.
    pub fn load(path: &Path) -> Result<Self> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| ReplayError::param("topology", "path contains a NUL byte"))?;
        // SAFETY: `c` is a valid NUL-terminated path; dlopen has no other precondition.
        let handle = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            return Err(ReplayError::Io(format!(
                "{}: {}",
                path.display(),
                last_dl_error()
            )));
        }
        let sym = |name: &str| -> Result<*mut c_void> {
            let n = CString::new(name).map_err(|_| ReplayError::Io("bad symbol".into()))?;
            // SAFETY: handle is a live dlopen handle and `n` is NUL-terminated.
            let p = unsafe { dlsym(handle, n.as_ptr()) };
            if p.is_null() {
                Err(ReplayError::Io(format!(
                    "{}: missing function {name}",
                    path.display()
                )))
            } else {
                Ok(p)
            }
        };
        let resolved = (|| -> Result<_> {
            Ok((
                sym("numaflex_start")?,
                sym("numaflex_end")?,
                sym("compute_bandwidth_for_arrival")?,
                sym("compute_bandwidth_for_departure")?,
            ))
        })();
        let (s, e, a, d) = match resolved {
            Ok(v) => v,
            Err(err) => {
                // SAFETY: handle came from dlopen and is closed once.
                unsafe { dlclose(handle) };
                return Err(err);
            }
        };
        // SAFETY: the symbols are the manual's functions; their C signatures are the
        // function pointer types above (the plug-in's contract).
        unsafe {
            Ok(Self {
                handle,
                start: std::mem::transmute::<*mut c_void, StartFn>(s),
                end: std::mem::transmute::<*mut c_void, EndFn>(e),
                arrival: std::mem::transmute::<*mut c_void, ArrivalFn>(a),
                departure: std::mem::transmute::<*mut c_void, DepartureFn>(d),
            })
        }
    }
}

impl Drop for CPlugin {
    fn drop(&mut self) {
        // SAFETY: handle came from dlopen and is closed exactly once.
        unsafe { dlclose(self.handle) };
    }
}

fn c_len(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

impl Topology for CPlugin {
    fn start(&mut self, nprocs: i32, buffered_bandwidth: f64) {
        // SAFETY: resolved from the plug-in with this signature.
        unsafe { (self.start)(nprocs, buffered_bandwidth) }
    }
    fn end(&mut self, real_time: f64) {
        // SAFETY: as above.
        unsafe { (self.end)(real_time) }
    }
    fn arrival(
        &mut self,
        real_time: f64,
        receiver: i32,
        sender: i32,
        req_size: i32,
        live: &mut [BandelaItem],
    ) -> f64 {
        let nb_live = c_len(live.len().saturating_sub(1));
        // SAFETY: `live` has nb_live + 1 valid items, as the interface requires.
        unsafe {
            (self.arrival)(
                real_time,
                receiver,
                sender,
                req_size,
                nb_live,
                live.as_mut_ptr(),
            )
        }
    }
    fn departure(&mut self, real_time: f64, receiver: i32, sender: i32, live: &mut [BandelaItem]) {
        // SAFETY: `live` has exactly nb_live valid items.
        unsafe {
            (self.departure)(
                real_time,
                receiver,
                sender,
                c_len(live.len()),
                live.as_mut_ptr(),
            )
        }
    }
}

/// The running transfers the model reports to a [`Topology`].
pub(crate) struct LiveTransfers {
    live: Vec<(f64, BandelaItem)>,
}

impl LiveTransfers {
    pub(crate) fn new() -> Self {
        Self { live: Vec::new() }
    }

    /// Reports the transfers that ended by `now`, in end order.
    pub(crate) fn retire(&mut self, topo: &mut dyn Topology, now: f64) {
        loop {
            let Some(k) = self
                .live
                .iter()
                .enumerate()
                .filter(|(_, (e, _))| *e <= now)
                .min_by(|a, b| a.1.0.total_cmp(&b.1.0))
                .map(|(k, _)| k)
            else {
                return;
            };
            let (end, it) = self.live.remove(k);
            let mut items: Vec<BandelaItem> = self.live.iter().map(|x| x.1).collect();
            topo.departure(end, it.receiver, it.sender, &mut items);
            for (slot, it) in self.live.iter_mut().zip(items) {
                slot.1 = it;
            }
        }
    }

    /// A new receive transfer at `now`: returns its bandwidth (MB/s) from the plug-in.
    pub(crate) fn arrive(
        &mut self,
        topo: &mut dyn Topology,
        now: f64,
        receiver: u32,
        sender: u32,
        bytes: u64,
    ) -> f64 {
        self.retire(topo, now);
        let new = BandelaItem {
            func: 0,
            receiver: c_int::try_from(receiver).unwrap_or(c_int::MAX),
            sender: c_int::try_from(sender).unwrap_or(c_int::MAX),
            old_bandwidth: 0.0,
            new_bandwidth: 0.0,
            convenience: std::ptr::null_mut(),
        };
        let mut items: Vec<BandelaItem> = self.live.iter().map(|x| x.1).collect();
        items.push(new);
        let bw = topo.arrival(
            now,
            new.receiver,
            new.sender,
            c_int::try_from(bytes).unwrap_or(c_int::MAX),
            &mut items,
        );
        let last = items.pop();
        for (slot, it) in self.live.iter_mut().zip(items) {
            slot.1 = it;
        }
        if let Some(mut it) = last {
            it.new_bandwidth = bw;
            let dur = if bw > 0.0 {
                bytes as f64 / (bw * 1e6)
            } else {
                0.0
            };
            self.live.push((now + dur, it));
        }
        bw
    }
}
