use super::*;
use crate::ids::new_id;

/// `n` raw outputs of run `run` (one task each), distinct contents.
fn outputs(run: &str, n: usize) -> Vec<(String, Bytes)> {
    (0..n)
        .map(|i| {
            let key = layout::raw_key(run, &new_id(), "host.json").unwrap();
            let body = format!("{{\"hostname\":\"node{i:04}\",\"cores\":{}}}", 8 + i);
            (key, Bytes::from(body))
        })
        .collect()
}

fn expected(files: &[(String, Bytes)]) -> Vec<BundleMember> {
    files
        .iter()
        .map(|(k, d)| BundleMember {
            key: k.clone(),
            bytes: d.len() as u64,
            sha256: sha256_hex(d),
            format: String::new(),
        })
        .collect()
}

fn lake() -> (tempfile::TempDir, Lake) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::local(dir.path()).unwrap();
    (dir, lake)
}

#[test]
fn a_bundle_reads_back_what_was_packed() {
    let run = new_id();
    let key = layout::raw_bundle_key(&run).unwrap();
    let mut files = outputs(&run, 5);
    // A file name past tar's 100-byte field.
    let long = format!("{}.json", "x".repeat(150));
    files.push((
        layout::raw_key(&run, &new_id(), &long).unwrap(),
        Bytes::from_static(b""),
    ));
    let data = pack(&key, &files).unwrap();
    // Deterministic: the same files make the same bytes.
    assert_eq!(data, pack(&key, &files).unwrap());
    let mut seen = Vec::new();
    let got = read(&key, &data, |k, d| {
        seen.push((k.to_string(), Bytes::copy_from_slice(d)));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, files);
    assert_eq!(got, expected(&files));
    check_members(&key, &got, &expected(&files)).unwrap();
    assert_eq!(
        member(&key, &data, &files[2].0).unwrap(),
        Some(files[2].1.clone())
    );
    assert_eq!(
        member(&key, &data, &layout::raw_key(&run, &new_id(), "x").unwrap()).unwrap(),
        None
    );
    // Missing, extra and altered members are named.
    let e = check_members(&key, &got[1..], &expected(&files)).unwrap_err();
    assert!(e.to_string().contains(&files[0].0), "{e}");
    let e = check_members(&key, &got, &expected(&files[1..])).unwrap_err();
    assert!(e.to_string().contains("is not one of them"), "{e}");
    let mut other = expected(&files);
    other[3].sha256 = "00".repeat(32);
    let e = check_members(&key, &got, &other).unwrap_err();
    assert!(e.to_string().contains("SHA-256"), "{e}");
}

#[test]
fn formats_ride_in_pax_headers() {
    let run = new_id();
    let key = layout::raw_bundle_key(&run).unwrap();
    let files = outputs(&run, 2);
    let m = vec![
        (
            files[0].0.clone(),
            "hostinfo".to_string(),
            files[0].1.clone(),
        ),
        (files[1].0.clone(), String::new(), files[1].1.clone()),
    ];
    let data = pack_with_formats(&key, &m).unwrap();
    let got = read(&key, &data, |_, _| Ok(())).unwrap();
    let formats: Vec<&str> = got.iter().map(|g| g.format.as_str()).collect();
    assert_eq!(formats, ["hostinfo", ""]);
    let mut want = expected(&files);
    want[0].format = "hostinfo".into();
    check_members(&key, &got, &want).unwrap();
    want[0].format = "log".into();
    let e = check_members(&key, &got, &want).unwrap_err().to_string();
    assert!(e.contains("format 'hostinfo', 'log' expected"), "{e}");
    let bad = vec![(files[0].0.clone(), "../x".to_string(), files[0].1.clone())];
    assert!(pack_with_formats(&key, &bad).is_err());
}

#[test]
fn pack_refuses_members_of_another_run_or_twice() {
    let run = new_id();
    let key = layout::raw_bundle_key(&run).unwrap();
    let other = outputs(&new_id(), 1);
    assert!(pack(&key, &other).is_err());
    let mut files = outputs(&run, 1);
    files.push(files[0].clone());
    assert!(
        pack(&key, &files)
            .unwrap_err()
            .to_string()
            .contains("twice")
    );
    assert!(pack("raw/x/bundle.tar.zst", &outputs(&run, 1)).is_err());
}

/// A tar stream with one member named `name` of type `kind`, zstd-compressed.
fn hand_made(name: &str, kind: tar::EntryType, body: &[u8], end_blocks: bool) -> Vec<u8> {
    let mut t = Vec::new();
    {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        // Bypass the builder's path checks: raw bytes in the name field.
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        t.extend_from_slice(h.as_bytes());
        t.extend_from_slice(body);
        t.resize(t.len().div_ceil(512) * 512, 0);
        if end_blocks {
            t.extend_from_slice(&[0; 1024]);
        }
    }
    zstd::encode_all(&t[..], 3).unwrap()
}

#[test]
fn corrupt_bundles_are_errors_naming_the_key_and_offset() {
    let run = new_id();
    let key = layout::raw_bundle_key(&run).unwrap();
    let files = outputs(&run, 4);
    let good = pack(&key, &files).unwrap();
    let err = |data: &[u8]| read(&key, data, |_, _| Ok(())).unwrap_err().to_string();
    // Not zstd at all; empty.
    for e in [err(b"hello, not a bundle"), err(b"")] {
        assert!(e.starts_with(&format!("{key}: byte offset ")), "{e}");
    }
    // Cut anywhere: never accepted as whole.
    for cut in [
        1,
        good.len() / 3,
        good.len() / 2,
        good.len() - 5,
        good.len() - 1,
    ] {
        let e = err(&good[..cut]);
        assert!(e.starts_with(&format!("{key}: byte offset ")), "{cut}: {e}");
    }
    // A flipped bit: the checksum (or the tar header's) catches it.
    for at in [20, good.len() / 2, good.len() - 6] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        let e = err(&b);
        assert!(e.starts_with(&format!("{key}: byte offset ")), "{at}: {e}");
    }
    // A tar cut after a member (no end-of-archive blocks).
    let name = files[0].0.clone();
    let e = err(&hand_made(&name, tar::EntryType::Regular, b"abc", false));
    assert!(e.contains("truncated"), "{e}");
    assert!(e.starts_with(&format!("{key}: byte offset 1024: ")), "{e}");
    // Well formed, but not a plain file, or named by no raw key of the run.
    let e = err(&hand_made(&name, tar::EntryType::Symlink, b"", true));
    assert!(e.contains("plain files only"), "{e}");
    assert!(e.starts_with(&format!("{key}: byte offset 0: ")), "{e}");
    for bad_name in [
        "../../etc/passwd".to_string(),
        format!("raw/{}/{}/x", new_id(), new_id()),
        format!("raw/{run}/x/y"),
    ] {
        let e = err(&hand_made(&bad_name, tar::EntryType::Regular, b"x", true));
        assert!(e.contains("is not a raw output of run"), "{e}");
    }
    // The one well-formed hand-made member reads back.
    let ok = hand_made(&name, tar::EntryType::Regular, b"abc", true);
    assert_eq!(
        member(&key, &ok, &name).unwrap(),
        Some(Bytes::from_static(b"abc"))
    );
    // Garbage after the archive.
    let mut t = zstd::decode_all(&good[..]).unwrap();
    t.extend_from_slice(b"junk");
    let e = err(&zstd::encode_all(&t[..], 3).unwrap());
    assert!(e.contains("bytes after the end of the archive"), "{e}");
    // No member.
    let e = err(&zstd::encode_all(&[0u8; 1024][..], 3).unwrap());
    assert!(e.contains("holds no member"), "{e}");
}

#[test]
fn a_copy_of_a_bundle_extracts_under_its_raw_keys() {
    let run = new_id();
    let key = layout::raw_bundle_key(&run).unwrap();
    let files = outputs(&run, 3);
    let data = pack(&key, &files).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let got = extract_copy("/tmp/copy.tar.zst", &data, dir.path()).unwrap();
    assert_eq!(got.len(), 3);
    for ((path, m), (key, body)) in got.iter().zip(&files) {
        assert_eq!(&m.key, key);
        assert!(path.ends_with("host.json"), "{}", path.display());
        assert_eq!(std::fs::read(path).unwrap(), body.to_vec());
    }
    // Members of two runs in one copy are refused, naming the copy.
    let mut t = tar::Builder::new(Vec::new());
    for (k, d) in files.iter().take(1).chain(&outputs(&new_id(), 1)) {
        let mut h = tar::Header::new_gnu();
        h.set_size(d.len() as u64);
        h.set_mode(0o644);
        t.append_data(&mut h, k, d.as_ref()).unwrap();
    }
    let mixed = zstd::encode_all(&t.into_inner().unwrap()[..], 3).unwrap();
    let e = read_copy("/tmp/mixed.tar.zst", &mixed, |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/tmp/mixed.tar.zst: byte offset ") && e.contains(&run),
        "{e}"
    );
}

#[tokio::test]
async fn bundling_writes_checks_then_deletes_and_readers_follow() {
    let (dir, lake) = lake();
    let run = new_id();
    let files = outputs(&run, 6);
    for (k, d) in &files {
        lake.put(k, d.clone()).await.unwrap();
    }
    let want = expected(&files);
    let rep = lake.bundle_raw(&run, &want).await.unwrap();
    assert_eq!((rep.members, rep.deleted, rep.found), (6, 6, false));
    assert_eq!(
        rep.member_bytes,
        files.iter().map(|f| f.1.len() as u64).sum::<u64>()
    );
    // One object left under the run, and the emptied task directories gone.
    let left = lake
        .list(&layout::raw_run_prefix(&run).unwrap())
        .await
        .unwrap();
    assert_eq!(left, vec![(rep.key.clone(), rep.bundle_bytes)]);
    let run_dir = dir.path().join("raw").join(&run);
    assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 1);
    // Every reader of a raw key still gets its bytes.
    for (k, d) in &files {
        assert_eq!(&lake.get_raw(k).await.unwrap(), d);
        assert!(lake.raw_exists(k).await.unwrap());
        let dest = dir.path().join("dl");
        assert_eq!(lake.download_raw(k, &dest).await.unwrap(), d.len() as u64);
        assert_eq!(std::fs::read(&dest).unwrap(), d.to_vec());
    }
    let gone = layout::raw_key(&run, &new_id(), "host.json").unwrap();
    assert!(!lake.raw_exists(&gone).await.unwrap());
    let e = lake.get_raw(&gone).await.unwrap_err().to_string();
    assert!(e.contains(&rep.key), "{e}");
    // A retry finds the complete bundle and has nothing left to delete.
    let again = lake.bundle_raw(&run, &want).await.unwrap();
    assert_eq!((again.found, again.deleted), (true, 0));
    assert_eq!(again.bundle_bytes, rep.bundle_bytes);
}

#[tokio::test]
async fn an_interrupted_bundling_is_finished_by_a_retry() {
    let (_dir, lake) = lake();
    let run = new_id();
    let files = outputs(&run, 5);
    for (k, d) in &files {
        lake.put(k, d.clone()).await.unwrap();
    }
    let want = expected(&files);
    // Killed after the put and two deletes.
    let key = layout::raw_bundle_key(&run).unwrap();
    lake.put(&key, Bytes::from(pack(&key, &files).unwrap()))
        .await
        .unwrap();
    lake.delete(&files[0].0).await.unwrap();
    lake.delete(&files[3].0).await.unwrap();
    let rep = lake.bundle_raw(&run, &want).await.unwrap();
    assert_eq!((rep.found, rep.deleted), (true, 3));
    for (k, d) in &files {
        assert_eq!(&lake.get_raw(k).await.unwrap(), d);
    }
}

#[tokio::test]
async fn a_partial_bundle_is_never_trusted() {
    let (_dir, lake) = lake();
    let run = new_id();
    let files = outputs(&run, 4);
    for (k, d) in &files {
        lake.put(k, d.clone()).await.unwrap();
    }
    let want = expected(&files);
    let key = layout::raw_bundle_key(&run).unwrap();
    // A bundle of three of the four (an older attempt of a run whose outputs
    // were not all recorded), and a cut one: both written again.
    for bad in [
        pack(&key, &files[..3]).unwrap(),
        pack(&key, &files).unwrap()[..40].to_vec(),
    ] {
        for (k, d) in &files {
            lake.put(k, d.clone()).await.unwrap();
        }
        lake.put(&key, Bytes::from(bad)).await.unwrap();
        let rep = lake.bundle_raw(&run, &want).await.unwrap();
        assert_eq!((rep.found, rep.deleted), (false, 4));
        let got = read(&key, &lake.get(&key).await.unwrap(), |_, _| Ok(())).unwrap();
        check_members(&key, &got, &want).unwrap();
    }
    // A bad bundle when an object is already gone: an error, nothing
    // deleted, the bundle left for an administrator.
    for (k, d) in &files[1..] {
        lake.put(k, d.clone()).await.unwrap();
    }
    lake.put(&key, Bytes::from(pack(&key, &files[1..]).unwrap()))
        .await
        .unwrap();
    let e = lake.bundle_raw(&run, &want).await.unwrap_err().to_string();
    assert!(
        e.contains(&files[0].0) && e.contains("nothing deleted"),
        "{e}"
    );
    for (k, _) in &files[1..] {
        assert!(lake.size(k).await.unwrap().is_some(), "{k} was deleted");
    }
    // An object that differs from the record is not bundled.
    let run = new_id();
    let files = outputs(&run, 2);
    for (k, _) in &files {
        lake.put(k, Bytes::from_static(b"changed")).await.unwrap();
    }
    let e = lake
        .bundle_raw(&run, &expected(&files))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the record says"), "{e}");
    assert!(
        lake.size(&layout::raw_bundle_key(&run).unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn bundle_raw_refuses_foreign_keys() {
    let (_dir, lake) = lake();
    let run = new_id();
    let other = expected(&outputs(&new_id(), 1));
    assert!(lake.bundle_raw(&run, &other).await.is_err());
    assert!(lake.bundle_raw(&run, &[]).await.is_err());
    assert!(lake.bundle_raw("../x", &other).await.is_err());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any bytes, and a good bundle with bytes changed anywhere: an
        /// error naming the key (or, for a change the checksum cannot see,
        /// the same members), never a panic.
        #[test]
        fn damaged_bundles_never_panic(
            junk in proptest::collection::vec(any::<u8>(), 0..2048),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let run = new_id();
            let key = layout::raw_bundle_key(&run).unwrap();
            if let Err(e) = read(&key, &junk, |_, _| Ok(())) {
                prop_assert!(e.to_string().starts_with(&key));
            }
            let files = outputs(&run, 3);
            let mut b = pack(&key, &files).unwrap();
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x.max(1);
            }
            match read(&key, &b, |_, _| Ok(())) {
                Ok(got) => prop_assert!(check_members(&key, &got, &expected(&files)).is_ok()),
                Err(e) => {
                    let head = format!("{key}: ");
                    prop_assert!(e.to_string().starts_with(&head));
                }
            }
        }
    }
}
