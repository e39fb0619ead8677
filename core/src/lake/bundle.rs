//! Raw bundles: the per-node raw outputs of one run packed into one object,
//! `raw/{run_id}/bundle.tar.zst` ([`layout::raw_bundle_key`]).
//!
//! A nightly `hostinfo` run on 600 nodes leaves 600 raw objects of a few
//! hundred bytes; a lake keeps millions of them a year. The record job of a
//! run whose outputs are of a kind that declares it
//! (`KindDescriptor::bundle_raw`) packs them with [`Lake::bundle_raw`] once
//! every other job of the run has ended.
//!
//! The container is a tar archive (GNU headers, so names past 100 bytes
//! fit) compressed with zstd (one frame, with its content checksum): tar
//! because every administrator can open it (`tar --zstd -tvf`, and
//! `tar --zstd -xf bundle.tar.zst` in the lake root restores the per-node
//! objects, since each member is named by its raw key), zstd because it is
//! already the lake's codec (Parquet) and the checksum catches a flipped
//! bit. Members are plain files in the order given, mode 0644, owner 0,
//! time 0, so the same files make the same bytes.
//!
//! Never losing data: [`Lake::bundle_raw`] puts the bundle (one atomic put),
//! reads it back and checks that it holds exactly the expected members with
//! their sizes and SHA-256 digests, and only then deletes the per-node
//! objects. A retry — after a crash anywhere, `kill -9` included — finds the
//! bundle, checks it the same way and finishes the deletes; a bundle that
//! does not check out is never trusted: it is written again from the
//! per-node objects, or, if some of those are already gone, the error names
//! the bundle and what is wrong with it and nothing more is deleted.
//!
//! Readers keep naming raw keys: [`Lake::get_raw`] and [`Lake::download_raw`]
//! read the object and, when it is gone, the member of that name in the
//! run's bundle. A bundle that does not decode is an [`Error::Bundle`]
//! naming the bundle key and the byte offset.
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use futures::StreamExt;

use super::{Lake, sha256_hex};
use crate::error::{Error, Result};
use crate::layout;

/// The largest member a bundle reader accepts (and [`Lake::bundle_raw`]
/// packs): bundles are for small per-node files.
pub const MAX_MEMBER_BYTES: u64 = 64 << 20;
/// The largest tar stream (decompressed) a reader goes through, and the
/// largest bundle [`Lake::bundle_raw`] writes.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;
/// zstd level of the bundles (fast; per-node JSON compresses ~15×).
const LEVEL: i32 = 3;
/// Objects fetched or deleted at once.
const CONCURRENCY: usize = 16;
const BLOCK: u64 = 512;

/// One member of a bundle as expected (from the state store's record of the
/// raw outputs) or as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleMember {
    /// The raw key `raw/{run_id}/{task_id}/{file}` (the member's name).
    pub key: String,
    /// Its size.
    pub bytes: u64,
    /// SHA-256, lower-case hex (empty: not known, not checked).
    pub sha256: String,
    /// Its declared output format (`hostinfo`, `log`; empty: not known),
    /// kept in the member's PAX header `BENCHLAKE.format`, so that an
    /// ingest of the bundle reads only its kind's files.
    pub format: String,
}

/// The PAX header (a vendor keyword: other tar readers skip it) holding a
/// member's output format.
pub const FORMAT_PAX_KEY: &str = "BENCHLAKE.format";

/// What [`Lake::bundle_raw`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleReport {
    /// The bundle's key.
    pub key: String,
    /// Members.
    pub members: usize,
    /// Their bytes.
    pub member_bytes: u64,
    /// The bundle's size.
    pub bundle_bytes: u64,
    /// Whether a complete bundle was found (an earlier attempt wrote it).
    pub found: bool,
    /// Per-node objects deleted by this call (a retry deletes those an
    /// interrupted attempt left).
    pub deleted: usize,
}

fn bad(key: &str, offset: u64, message: impl Into<String>) -> Error {
    Error::Bundle {
        key: key.to_string(),
        offset,
        message: message.into(),
    }
}

/// Packs `members` (raw key, content) into the bytes of bundle `bundle_key`.
/// Every member must be a raw output of the bundle's run, named once.
pub fn pack(bundle_key: &str, members: &[(String, Bytes)]) -> Result<Vec<u8>> {
    let m: Vec<(String, String, Bytes)> = members
        .iter()
        .map(|(k, d)| (k.clone(), String::new(), d.clone()))
        .collect();
    pack_with_formats(bundle_key, &m)
}

/// [`pack`] of (raw key, output format, content): a non-empty format is
/// kept in the member's [`FORMAT_PAX_KEY`] header.
pub fn pack_with_formats(bundle_key: &str, members: &[(String, String, Bytes)]) -> Result<Vec<u8>> {
    let run = layout::parse_raw_bundle_key(bundle_key)
        .ok_or_else(|| Error::invalid("bundle", format!("'{bundle_key}' is not a bundle key")))?;
    let mut seen = std::collections::BTreeSet::new();
    let io = |e: std::io::Error| Error::Io {
        path: bundle_key.into(),
        source: e,
    };
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), LEVEL).map_err(io)?;
    z.include_checksum(true).map_err(io)?;
    let mut tar = tar::Builder::new(z);
    tar.mode(tar::HeaderMode::Deterministic);
    for (key, format, data) in members {
        match layout::parse_raw_key(key) {
            Some((r, _, _)) if r == run => {}
            _ => {
                return Err(Error::invalid(
                    "bundle member",
                    format!("'{key}' is not a raw output of run {run}"),
                ));
            }
        }
        if !seen.insert(key.as_str()) {
            return Err(Error::invalid(
                "bundle member",
                format!("'{key}' is given twice"),
            ));
        }
        if data.len() as u64 > MAX_MEMBER_BYTES {
            return Err(Error::invalid(
                "bundle member",
                format!(
                    "'{key}' has {} bytes, more than {MAX_MEMBER_BYTES}",
                    data.len()
                ),
            ));
        }
        if !format.is_empty() {
            layout::validate_name("format", format)?;
            tar.append_pax_extensions([(FORMAT_PAX_KEY, format.as_bytes())])
                .map_err(io)?;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        tar.append_data(&mut h, key, data.as_ref()).map_err(io)?;
    }
    let z = tar.into_inner().map_err(io)?;
    let out = z.finish().map_err(io)?;
    Ok(out)
}

/// A reader that counts what was read through it and refuses to go past a
/// limit (a small bundle that decompresses to gigabytes).
struct Counting<R> {
    inner: R,
    pos: Rc<Cell<u64>>,
    limit: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let pos = self.pos.get() + n as u64;
        self.pos.set(pos);
        if pos > self.limit {
            return Err(std::io::Error::other(format!(
                "decompresses to more than {} bytes",
                self.limit
            )));
        }
        Ok(n)
    }
}

/// The compressed bytes, with how far the decompressor has consumed them.
struct Consumed<'a> {
    data: &'a [u8],
    pos: Rc<Cell<u64>>,
}

impl Read for Consumed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = self.fill_buf()?;
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Consumed<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let at = usize::try_from(self.pos.get()).unwrap_or(usize::MAX);
        Ok(self.data.get(at..).unwrap_or(&[]))
    }
    fn consume(&mut self, n: usize) {
        self.pos.set(self.pos.get() + n as u64);
    }
}

/// Reads bundle `bundle_key` from its bytes: calls `each(key, content)` for
/// every member in order and returns the members. Refused with an
/// [`Error::Bundle`] naming the key and the byte offset (of the tar stream,
/// and how far into the compressed object the decoder was): a stream that
/// does not decompress or whose checksum fails, a damaged or truncated tar,
/// a member that is not a plain file named by a raw key of the bundle's run,
/// a name given twice, a member or a stream past the limits, no member.
pub fn read(
    bundle_key: &str,
    data: &[u8],
    each: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<Vec<BundleMember>> {
    let Some(run) = layout::parse_raw_bundle_key(bundle_key) else {
        return Err(Error::invalid(
            "bundle",
            format!("'{bundle_key}' is not a bundle key"),
        ));
    };
    read_as(bundle_key, Some(run), data, each)
}

/// [`read`] of a bundle found elsewhere than its place in a lake (a copy
/// named on the command line): `label` names it in errors, and its members
/// must all be raw outputs of one run, that of the first.
pub fn read_copy(
    label: &str,
    data: &[u8],
    each: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<Vec<BundleMember>> {
    read_as(label, None, data, each)
}

/// Writes the members of the bundle copy `label` (bytes `data`) as files
/// under `dir` (`dir/{index:05}/{file}`, so two tasks' files of one name
/// do not meet); returns each file's path with its member (raw key,
/// size, digest, format), in the bundle's order.
pub fn extract_copy(
    label: &str,
    data: &[u8],
    dir: &Path,
) -> Result<Vec<(std::path::PathBuf, BundleMember)>> {
    let mut out = Vec::new();
    let members = read_copy(label, data, |key, content| {
        let file = layout::parse_raw_key(key)
            .map(|(_, _, f)| f)
            .ok_or_else(|| Error::invalid("bundle member", key.to_string()))?;
        let sub = dir.join(format!("{:05}", out.len()));
        let io = |source| Error::Io {
            path: sub.clone(),
            source,
        };
        std::fs::create_dir_all(&sub).map_err(io)?;
        let path = sub.join(file);
        std::fs::write(&path, content).map_err(io)?;
        out.push(path);
        Ok(())
    })?;
    Ok(out.into_iter().zip(members).collect())
}

fn read_as(
    bundle_key: &str,
    run: Option<&str>,
    data: &[u8],
    mut each: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<Vec<BundleMember>> {
    let mut run: Option<String> = run.map(str::to_string);
    let zpos = Rc::new(Cell::new(0u64));
    let tpos = Rc::new(Cell::new(0u64));
    let at = |m: String| {
        bad(
            bundle_key,
            tpos.get(),
            format!("{m} (tar stream; compressed byte offset {})", zpos.get()),
        )
    };
    let decoder = zstd::stream::read::Decoder::with_buffer(Consumed {
        data,
        pos: zpos.clone(),
    })
    .map_err(|e| at(format!("zstd: {e}")))?;
    let mut archive = tar::Archive::new(Counting {
        inner: decoder,
        pos: tpos.clone(),
        limit: MAX_BUNDLE_BYTES,
    });
    let mut out: Vec<BundleMember> = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    // Where the last member's data ends (padded to a block).
    let mut end = 0u64;
    {
        let entries = archive
            .entries()
            .map_err(|e| at(format!("not a tar stream: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| at(format!("damaged tar header: {e}")))?;
            let header_at = entry.raw_header_position();
            let here = |m: String| bad(bundle_key, header_at, m);
            let kind = entry.header().entry_type();
            if kind != tar::EntryType::Regular {
                return Err(here(format!(
                    "member of type {kind:?}; a bundle holds plain files only"
                )));
            }
            let name = entry
                .path_bytes()
                .into_owned()
                .into_iter()
                .map(char::from)
                .collect::<String>();
            let of = layout::parse_raw_key(&name).map(|(r, _, _)| r);
            let want = run.get_or_insert_with(|| of.unwrap_or_default().to_string());
            if of != Some(want.as_str()) {
                return Err(here(format!(
                    "member '{}' is not a raw output of run {want}",
                    name.escape_debug().take(120).collect::<String>()
                )));
            }
            if !names.insert(name.clone()) {
                return Err(here(format!("member '{name}' appears twice")));
            }
            let size = entry.size();
            if size > MAX_MEMBER_BYTES {
                return Err(here(format!(
                    "member '{name}' claims {size} bytes, more than {MAX_MEMBER_BYTES}"
                )));
            }
            let format = match entry
                .pax_extensions()
                .map_err(|e| here(format!("member '{name}': PAX header: {e}")))?
            {
                Some(exts) => {
                    let mut format = String::new();
                    for x in exts {
                        let x = x.map_err(|e| here(format!("member '{name}': PAX header: {e}")))?;
                        if x.key_bytes() == FORMAT_PAX_KEY.as_bytes() {
                            let v = String::from_utf8_lossy(x.value_bytes()).into_owned();
                            if layout::validate_name("format", &v).is_err() {
                                return Err(here(format!(
                                    "member '{name}': format '{}' is not a name",
                                    v.escape_debug().take(80).collect::<String>()
                                )));
                            }
                            format = v;
                        }
                    }
                    format
                }
                None => String::new(),
            };
            let data_at = entry.raw_file_position();
            let mut buf = Vec::with_capacity(size as usize);
            entry
                .read_to_end(&mut buf)
                .map_err(|e| at(format!("member '{name}': {e}")))?;
            if buf.len() as u64 != size {
                return Err(bad(
                    bundle_key,
                    data_at,
                    format!(
                        "member '{name}' ends after {} of its {size} bytes",
                        buf.len()
                    ),
                ));
            }
            each(&name, &buf)?;
            end = data_at + size.div_ceil(BLOCK) * BLOCK;
            out.push(BundleMember {
                key: name,
                bytes: size,
                sha256: sha256_hex(&buf),
                format,
            });
        }
    }
    if out.is_empty() {
        return Err(bad(bundle_key, 0, "holds no member"));
    }
    // tar ends quietly at end of input: a bundle cut after a member would
    // look whole. The writer ends it with two zero blocks; they must be
    // there, and nothing but zeros after them.
    let mut rest = archive.into_inner();
    if tpos.get() < end + BLOCK {
        return Err(bad(
            bundle_key,
            tpos.get(),
            "ends without the end-of-archive blocks (truncated)",
        ));
    }
    let mut tail = Vec::new();
    let tail_at = tpos.get();
    rest.read_to_end(&mut tail)
        .map_err(|e| at(format!("after the members: {e}")))?;
    if let Some(i) = tail.iter().position(|b| *b != 0) {
        return Err(bad(
            bundle_key,
            tail_at + i as u64,
            "bytes after the end of the archive",
        ));
    }
    if tpos.get() < end + 2 * BLOCK {
        return Err(bad(
            bundle_key,
            tpos.get(),
            "ends without the end-of-archive blocks (truncated)",
        ));
    }
    Ok(out)
}

/// Checks that the members read from bundle `bundle_key` are exactly
/// `expected` (names, sizes, and digests where known).
pub fn check_members(
    bundle_key: &str,
    got: &[BundleMember],
    expected: &[BundleMember],
) -> Result<()> {
    let want: BTreeMap<&str, &BundleMember> =
        expected.iter().map(|m| (m.key.as_str(), m)).collect();
    let have: BTreeMap<&str, &BundleMember> = got.iter().map(|m| (m.key.as_str(), m)).collect();
    let wrong = |m: String| {
        Error::invalid(
            "bundle",
            format!("{bundle_key} does not hold the run's raw outputs: {m}"),
        )
    };
    if let Some(k) = want.keys().find(|k| !have.contains_key(*k)) {
        return Err(wrong(format!(
            "{k} is missing ({} of {} members)",
            have.len(),
            want.len()
        )));
    }
    if let Some(k) = have.keys().find(|k| !want.contains_key(*k)) {
        return Err(wrong(format!("{k} is not one of them")));
    }
    for (k, w) in &want {
        let h = have[k];
        if h.bytes != w.bytes {
            return Err(wrong(format!(
                "{k} has {} bytes, {} expected",
                h.bytes, w.bytes
            )));
        }
        if !w.format.is_empty() && h.format != w.format {
            return Err(wrong(format!(
                "{k} is of format '{}', '{}' expected",
                h.format, w.format
            )));
        }
        if !w.sha256.is_empty() && !h.sha256.eq_ignore_ascii_case(&w.sha256) {
            return Err(wrong(format!(
                "{k} has SHA-256 {}, {} expected",
                h.sha256, w.sha256
            )));
        }
    }
    Ok(())
}

/// The content of member `key` of a bundle's bytes (None when the bundle
/// does not hold it).
pub fn member(bundle_key: &str, data: &[u8], key: &str) -> Result<Option<Bytes>> {
    let mut found = None;
    read(bundle_key, data, |name, content| {
        if name == key {
            found = Some(Bytes::copy_from_slice(content));
        }
        Ok(())
    })?;
    Ok(found)
}

fn not_found(e: &Error) -> bool {
    matches!(e, Error::ObjectStore(object_store::Error::NotFound { .. }))
}

impl Lake {
    /// The bytes of bundle `key`, or None when there is none. A bundle past
    /// [`MAX_BUNDLE_BYTES`] is refused before it is read.
    pub async fn get_bundle(&self, key: &str) -> Result<Option<Bytes>> {
        let Some(size) = self.size(key).await? else {
            return Ok(None);
        };
        if size > MAX_BUNDLE_BYTES {
            return Err(bad(
                key,
                0,
                format!("{size} bytes, more than a bundle may hold ({MAX_BUNDLE_BYTES})"),
            ));
        }
        match self.get(key).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Raw output `key` from its run's bundle; a NotFound error naming both
    /// when neither holds it.
    async fn raw_from_bundle(&self, key: &str, missing: Error) -> Result<Bytes> {
        let Some(run) = layout::parse_raw_key(key).map(|(r, _, _)| r) else {
            return Err(missing);
        };
        let bundle = layout::raw_bundle_key(run)?;
        let Some(data) = self.get_bundle(&bundle).await? else {
            return Err(missing);
        };
        let k = key.to_string();
        let b = bundle.clone();
        let got = tokio::task::spawn_blocking(move || member(&b, &data, &k))
            .await
            .map_err(|e| bad(&bundle, 0, format!("reader: {e}")))??;
        match got {
            Some(d) => {
                tracing::debug!(%key, %bundle, "raw output read from its run's bundle");
                Ok(d)
            }
            None => Err(Error::ObjectStore(object_store::Error::NotFound {
                path: key.to_string(),
                source: format!("neither the object nor a member of {bundle}").into(),
            })),
        }
    }

    /// Reads raw output `key`: the object, or — once its run's outputs are
    /// bundled — the member of that name in `raw/{run_id}/bundle.tar.zst`.
    pub async fn get_raw(&self, key: &str) -> Result<Bytes> {
        match self.get(key).await {
            Err(e) if not_found(&e) => self.raw_from_bundle(key, e).await,
            r => r,
        }
    }

    /// [`Lake::download`] of a raw output, from its run's bundle when the
    /// object is gone ([`Lake::get_raw`]).
    pub async fn download_raw(&self, key: &str, dest: &Path) -> Result<u64> {
        match self.download(key, dest).await {
            Err(e) if not_found(&e) => {
                let data = self.raw_from_bundle(key, e).await?;
                let io = |source| Error::Io {
                    path: dest.to_path_buf(),
                    source,
                };
                let mut f = std::fs::File::create(dest).map_err(io)?;
                f.write_all(&data).map_err(io)?;
                Ok(data.len() as u64)
            }
            r => r,
        }
    }

    /// Whether raw output `key` can be read: its object, or a member of its
    /// run's bundle.
    pub async fn raw_exists(&self, key: &str) -> Result<bool> {
        if self.size(key).await?.is_some() {
            return Ok(true);
        }
        match self.get_raw(key).await {
            Ok(_) => Ok(true),
            Err(e) if not_found(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Packs the raw outputs `files` of run `run_id` into its bundle and
    /// deletes their objects (see the module: the bundle is written and read
    /// back before anything is deleted; idempotent). `files` are what the
    /// state store recorded of them (key, size, digest).
    pub async fn bundle_raw(&self, run_id: &str, files: &[BundleMember]) -> Result<BundleReport> {
        let key = layout::raw_bundle_key(run_id)?;
        let mut names = std::collections::BTreeSet::new();
        for f in files {
            match layout::parse_raw_key(&f.key) {
                Some((r, _, _)) if r == run_id => {}
                _ => {
                    return Err(Error::invalid(
                        "bundle member",
                        format!("'{}' is not a raw output of run {run_id}", f.key),
                    ));
                }
            }
            if !names.insert(f.key.as_str()) {
                return Err(Error::invalid(
                    "bundle member",
                    format!("'{}' is given twice", f.key),
                ));
            }
        }
        if files.is_empty() {
            return Err(Error::invalid("bundle", "no raw output to bundle"));
        }
        let member_bytes: u64 = files.iter().map(|f| f.bytes).sum();
        if member_bytes > MAX_BUNDLE_BYTES / 2 {
            return Err(Error::invalid(
                "bundle",
                format!("{member_bytes} bytes of raw outputs are too many for one bundle"),
            ));
        }
        // 1. A bundle an earlier attempt wrote is used only if it checks out.
        let mut found = false;
        let mut bundle_bytes = 0u64;
        match self.get_bundle(&key).await {
            Ok(Some(data)) => match verify(&key, data.clone(), files.to_vec()).await {
                Ok(()) => {
                    found = true;
                    bundle_bytes = data.len() as u64;
                }
                Err(e) => {
                    tracing::warn!(bundle = %key, error = %e, "an earlier bundle does not hold the run's raw outputs; writing it again")
                }
            },
            Ok(None) => {}
            Err(e @ Error::Bundle { .. }) => {
                tracing::warn!(bundle = %key, error = %e, "an earlier bundle is too large to trust; writing it again")
            }
            Err(e) => return Err(e),
        }
        // 2. Otherwise: every object, checked against the record, packed,
        // put, read back and checked.
        if !found {
            let key = key.as_str();
            let fetched: Vec<Result<(String, String, Bytes)>> = futures::stream::iter(files)
                .map(|f| async move {
                    let data = self.get(&f.key).await.map_err(|e| {
                        if not_found(&e) {
                            Error::invalid(
                                "bundle",
                                format!(
                                    "{} is missing, and {key} does not hold it: cannot bundle the run's raw outputs (nothing deleted)",
                                    f.key
                                ),
                            )
                        } else {
                            e
                        }
                    })?;
                    let digest = sha256_hex(&data);
                    if data.len() as u64 != f.bytes
                        || (!f.sha256.is_empty() && !digest.eq_ignore_ascii_case(&f.sha256))
                    {
                        return Err(Error::invalid(
                            "bundle",
                            format!(
                                "{} has {} bytes and SHA-256 {digest}; the record says {} bytes and {} (nothing bundled)",
                                f.key,
                                data.len(),
                                f.bytes,
                                f.sha256
                            ),
                        ));
                    }
                    Ok((f.key.clone(), f.format.clone(), data))
                })
                .buffered(CONCURRENCY)
                .collect()
                .await;
            let members = fetched.into_iter().collect::<Result<Vec<_>>>()?;
            let k = key.to_string();
            let packed = tokio::task::spawn_blocking(move || pack_with_formats(&k, &members))
                .await
                .map_err(|e| bad(key, 0, format!("packing: {e}")))??;
            self.put(key, Bytes::from(packed)).await?;
            let back = self.get(key).await?;
            bundle_bytes = back.len() as u64;
            verify(key, back, files.to_vec()).await?;
        }
        // 3. Only now the per-node objects go.
        let deleted: Vec<Result<bool>> = futures::stream::iter(files)
            .map(|f| async move {
                match self.size(&f.key).await? {
                    Some(_) => self.delete(&f.key).await.map(|()| true),
                    None => Ok(false),
                }
            })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut n = 0;
        for d in deleted {
            n += usize::from(d?);
        }
        if let Some(root) = self.local_dir() {
            // object_store leaves the tasks' emptied directories behind.
            for f in files {
                if let Some(dir) = Path::new(&f.key).parent() {
                    let _ = std::fs::remove_dir(root.join(dir));
                }
            }
        }
        tracing::info!(bundle = %key, members = files.len(), member_bytes, bundle_bytes, found, deleted = n, "raw outputs bundled");
        Ok(BundleReport {
            key,
            members: files.len(),
            member_bytes,
            bundle_bytes,
            found,
            deleted: n,
        })
    }
}

/// [`read`] and [`check_members`] on a blocking thread.
async fn verify(key: &str, data: Bytes, expected: Vec<BundleMember>) -> Result<()> {
    let k = key.to_string();
    tokio::task::spawn_blocking(move || {
        let got = read(&k, &data, |_, _| Ok(()))?;
        check_members(&k, &got, &expected)
    })
    .await
    .map_err(|e| bad(key, 0, format!("reader: {e}")))?
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
