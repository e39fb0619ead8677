//! What the dashboard's per-run views (LinkTest, I/O trends, alltoallv,
//! replay) derive from committed Parquet, kept in memory between requests.
//!
//! Committed objects never change (a retried job rewrites its key before the
//! commit, never after), so a derived value is cached under a key that names
//! the view, its parameters and the committed files it was computed from
//! (object key and size, [`fingerprint`]): a later commit to the run changes
//! the key, and the old entry ages out. Loads run on a blocking thread
//! ([`tokio::task::spawn_blocking`]), never on the async runtime's workers, and
//! concurrent requests for the same key wait for one load. The cache is
//! bounded by the approximate bytes of its values ([`BUDGET`]); the least
//! recently used entries go first. Failed loads are not cached.
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::CommittedFile;

/// Bytes of derived values the cache keeps at most (about six 4,096-rank
/// LinkTest matrices).
pub const BUDGET: usize = 512 << 20;

type Value = Arc<dyn Any + Send + Sync>;
type Cell = Arc<tokio::sync::OnceCell<Value>>;

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    tick: u64,
    bytes: usize,
}

struct Slot {
    cell: Cell,
    /// Approximate size once loaded (0 while loading).
    bytes: usize,
    used: u64,
}

/// The cache (see the module docs).
pub struct ViewCache {
    inner: Mutex<Inner>,
    budget: usize,
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("ViewCache")
            .field("entries", &g.slots.len())
            .field("bytes", &g.bytes)
            .finish()
    }
}

impl Default for ViewCache {
    fn default() -> Self {
        Self::with_budget(BUDGET)
    }
}

impl ViewCache {
    /// A cache keeping at most `budget` bytes of values.
    pub fn with_budget(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// The value of `key`, loading it with `load` on a blocking thread when
    /// it is not cached. `load` returns the value and its approximate size
    /// in bytes, or an error message (not cached).
    pub async fn get<T, F>(&self, key: String, load: F) -> Result<Arc<T>, String>
    where
        T: Any + Send + Sync,
        F: FnOnce() -> Result<(T, usize), String> + Send + 'static,
    {
        let cell = {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.tick += 1;
            let tick = g.tick;
            let slot = g.slots.entry(key.clone()).or_insert_with(|| Slot {
                cell: Arc::new(tokio::sync::OnceCell::new()),
                bytes: 0,
                used: tick,
            });
            slot.used = tick;
            slot.cell.clone()
        };
        let mut loaded_bytes = None;
        let v = cell
            .get_or_try_init(|| async {
                let (v, bytes) = tokio::task::spawn_blocking(load)
                    .await
                    .map_err(|e| format!("the load failed: {e}"))??;
                loaded_bytes = Some(bytes);
                Ok::<Value, String>(Arc::new(v))
            })
            .await;
        let v = match v {
            Ok(v) => v.clone(),
            Err(e) => {
                let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                if g.slots
                    .get(&key)
                    .is_some_and(|s| Arc::ptr_eq(&s.cell, &cell))
                {
                    g.slots.remove(&key);
                }
                return Err(e);
            }
        };
        if let Some(bytes) = loaded_bytes {
            self.admit(&key, &cell, bytes);
        }
        v.downcast::<T>()
            .map_err(|_| format!("cache entry {key} holds another type"))
    }

    /// The value of `key` when it is cached (loaded) and of type `T`.
    pub fn peek<T: Any + Send + Sync>(&self, key: &str) -> Option<Arc<T>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.tick += 1;
        let tick = g.tick;
        let slot = g.slots.get_mut(key)?;
        slot.used = tick;
        slot.cell.get()?.clone().downcast::<T>().ok()
    }

    /// Caches `value` (about `bytes` bytes) under `key` unless it is held
    /// already: e.g. the answer "no such permutation", so that asking again
    /// does not read the run again.
    pub fn put<T: Any + Send + Sync>(&self, key: String, value: T, bytes: usize) {
        let cell: Cell = Arc::new(tokio::sync::OnceCell::new_with(Some(
            Arc::new(value) as Value
        )));
        {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            if g.slots.contains_key(&key) {
                return;
            }
            g.tick += 1;
            let used = g.tick;
            g.slots.insert(
                key.clone(),
                Slot {
                    cell: cell.clone(),
                    bytes: 0,
                    used,
                },
            );
        }
        self.admit(&key, &cell, bytes);
    }

    /// Records the size of a value just loaded and evicts the least recently
    /// used other entries beyond the budget.
    fn admit(&self, key: &str, cell: &Cell, bytes: usize) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = g.slots.get_mut(key).filter(|s| Arc::ptr_eq(&s.cell, cell)) else {
            return;
        };
        slot.bytes = bytes;
        g.bytes += bytes;
        while g.bytes > self.budget {
            let victim = g
                .slots
                .iter()
                .filter(|(k, s)| k.as_str() != key && s.cell.initialized())
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            let Some(v) = victim else { break };
            if let Some(s) = g.slots.remove(&v) {
                g.bytes -= s.bytes;
            }
        }
    }

    /// Entries and bytes held (for tests and logs).
    pub fn usage(&self) -> (usize, usize) {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (g.slots.len(), g.bytes)
    }
}

/// A fingerprint of the committed files of `tables` among `files` (their
/// keys and sizes): part of a cache key, so a new commit makes a new entry.
pub fn fingerprint(files: &[CommittedFile], tables: &[&str]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut n = 0;
    let mut keys: Vec<(&str, u64)> = files
        .iter()
        .filter(|f| tables.contains(&f.table.as_str()))
        .map(|f| (f.key.as_str(), f.bytes))
        .collect();
    keys.sort();
    for (k, b) in keys {
        n += 1;
        for byte in k.bytes().chain(b.to_le_bytes()) {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{n}:{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn loads_once_evicts_least_recently_used_and_forgets_errors() {
        let c = ViewCache::with_budget(250);
        let loads = Arc::new(AtomicUsize::new(0));
        let get = |k: &'static str, v: u32| {
            let loads = loads.clone();
            let c = &c;
            async move {
                c.get(k.to_string(), move || {
                    loads.fetch_add(1, Ordering::SeqCst);
                    Ok((v, 100))
                })
                .await
            }
        };
        assert_eq!(*get("a", 1).await.unwrap(), 1);
        assert_eq!(*get("a", 9).await.unwrap(), 1, "cached");
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        get("b", 2).await.unwrap();
        get("a", 1).await.unwrap(); // a is now newer than b
        get("c", 3).await.unwrap(); // 300 > 250: b goes
        assert_eq!(c.usage(), (2, 200));
        assert_eq!(*get("b", 20).await.unwrap(), 20, "reloaded");
        // A failed load is not kept; the next request loads again.
        let e = c
            .get::<u32, _>("x".into(), || Err("broken".to_string()))
            .await;
        assert_eq!(e.unwrap_err(), "broken");
        assert_eq!(*c.get("x".into(), || Ok((7u32, 1))).await.unwrap(), 7);
        // Peeking and putting.
        assert_eq!(c.peek::<u32>("x").as_deref(), Some(&7));
        assert!(c.peek::<String>("x").is_none() && c.peek::<u32>("nope").is_none());
        c.put("neg".into(), "no such permutation".to_string(), 10);
        c.put("neg".into(), "other".to_string(), 10);
        assert_eq!(
            c.peek::<String>("neg").as_deref().map(String::as_str),
            Some("no such permutation")
        );
        // Another type under the same key is an error, not a panic.
        assert!(
            c.get::<String, _>("x".into(), || Ok((String::new(), 1)))
                .await
                .is_err()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_one_load() {
        let c = Arc::new(ViewCache::default());
        let loads = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for _ in 0..8 {
            let (c, loads) = (c.clone(), loads.clone());
            hs.push(tokio::spawn(async move {
                c.get("k".into(), move || {
                    loads.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    Ok((5u64, 8))
                })
                .await
                .unwrap()
            }));
        }
        for h in hs {
            assert_eq!(*h.await.unwrap(), 5);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }
}
