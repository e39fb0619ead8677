//! Catalog files at agent start: every bad catalog is refused by
//! [`benchlake_agent::load_catalog`] with a message naming the file and the
//! field, and the shipped catalogs load.
use std::path::Path;

use benchlake_agent::{builtin_catalog, load_catalog};

/// A good catalog; each bad one below changes one thing in it.
const BASE: &str = r#"
[[benchmark]]
name = "io"
kind = "io"
description = "a test entry"
command = ["sleep", "{seconds}", { when = "verbose", args = ["-v"] }, { when = "dir", args = ["--dir={dir}"] }]
launchers = ["local", "mpirun"]
timeout_s = 60
max_timeout_s = 600
env = { TAG = "{tag}" }
[[benchmark.param]]
name = "seconds"
type = "float"
default = "1"
min = 0
max = 60
[[benchmark.param]]
name = "verbose"
type = "bool"
default = "false"
[[benchmark.param]]
name = "tag"
type = "string"
default = "x"
[[benchmark.param]]
name = "dir"
type = "path"
optional = true
within = ["/tmp", "{scratch_dir}"]
[[benchmark.param]]
name = "mode"
type = "choice"
choices = ["a", "b"]
default = "a"
[[benchmark.param]]
name = "check_io_write_bw_mib_s"
type = "float"
optional = true
min = 0
[[benchmark.output]]
file = "result.json"
format = "ior"
required = true
"#;

/// `BASE` with `from` (which must occur) replaced by `to`.
fn with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "'{from}' is not in the base catalog");
    BASE.replacen(from, to, 1)
}

/// (what is wrong, the catalog, what the message must say).
fn bad_catalogs() -> Vec<(&'static str, String, &'static str)> {
    vec![
        // unknown keys, at every level
        (
            "unknown top-level key",
            format!("colour = \"blue\"\n{BASE}"),
            "unknown field `colour`",
        ),
        (
            "unknown benchmark key",
            with("timeout_s = 60", "timeout_s = 60\ntimeout = 5"),
            "unknown field `timeout`",
        ),
        (
            "unknown param key",
            with("default = \"1\"", "default = \"1\"\nmaximum = 3"),
            "unknown field `maximum`",
        ),
        (
            "unknown key in a when item",
            with("args = [\"-v\"] }", "args = [\"-v\"], also = [\"-q\"] }"),
            "unknown field `also`",
        ),
        (
            "when item without args",
            with(
                "{ when = \"verbose\", args = [\"-v\"] }",
                "{ when = \"verbose\" }",
            ),
            "missing field `args`",
        ),
        (
            "unknown output key",
            with("required = true", "required = true\nkeep = true"),
            "unknown field `keep`",
        ),
        (
            "unknown slurm key",
            format!("{BASE}[benchmark.slurm]\npartitionn = \"x\"\n"),
            "unknown field `partitionn`",
        ),
        // wrong types
        (
            "timeout as a string",
            with("timeout_s = 60", "timeout_s = \"60\""),
            "invalid type",
        ),
        (
            "default as a number",
            with("default = \"1\"", "default = 1"),
            "invalid type",
        ),
        (
            "launchers as a string",
            with(
                "launchers = [\"local\", \"mpirun\"]",
                "launchers = \"local\"",
            ),
            "invalid type",
        ),
        (
            "unknown parameter type",
            with("type = \"float\"", "type = \"double\""),
            "unknown variant `double`",
        ),
        (
            "missing kind",
            with("kind = \"io\"\n", ""),
            "missing field `kind`",
        ),
        (
            "not TOML",
            "[[benchmark]\nname = ".to_string(),
            "TOML parse error",
        ),
        (
            "no benchmarks",
            "# nothing here\n".to_string(),
            "no [[benchmark]] entries",
        ),
        // the program
        (
            "empty program",
            with("command = [\"sleep\",", "command = [\"\","),
            "the program (first element) is empty",
        ),
        (
            "program with arguments in one string",
            with("command = [\"sleep\",", "command = [\"sleep 5\","),
            "program 'sleep 5' contains whitespace",
        ),
        (
            "empty command",
            with(
                "command = [\"sleep\", \"{seconds}\", { when = \"verbose\", args = [\"-v\"] }, { when = \"dir\", args = [\"--dir={dir}\"] }]",
                "command = []",
            ),
            "command must start with the program",
        ),
        (
            "unknown placeholder",
            with("\"{seconds}\"", "\"{secs}\""),
            "unknown placeholder '{secs}'",
        ),
        (
            "optional parameter outside when",
            with("\"{seconds}\",", "\"{seconds}\", \"--dir={dir}\","),
            "uses optional parameter 'dir'",
        ),
        (
            "when on an unknown parameter",
            with("when = \"verbose\"", "when = \"loud\""),
            "'when' names unknown parameter 'loud'",
        ),
        (
            "when on an always-present parameter",
            with("when = \"verbose\"", "when = \"tag\""),
            "`when = \"tag\"` names a parameter that is always present",
        ),
        // names
        (
            "duplicate benchmark names",
            format!("{BASE}{BASE}"),
            "benchmark 'io' twice",
        ),
        (
            "bad benchmark name",
            with("name = \"io\"", "name = \"I O\""),
            "name must be 1-64 characters",
        ),
        (
            "duplicate parameter",
            with("name = \"tag\"", "name = \"seconds\""),
            "parameter 'seconds' twice",
        ),
        (
            "reserved parameter name",
            with("name = \"tag\"", "name = \"out_dir\""),
            "parameter name 'out_dir' is invalid or reserved",
        ),
        // defaults and limits
        (
            "default above max",
            with("default = \"1\"", "default = \"61\""),
            "61 is above the maximum 60",
        ),
        (
            "default below min",
            with("default = \"1\"", "default = \"-1\""),
            "-1 is below the minimum 0",
        ),
        (
            "min above max",
            with(
                "optional = true\nmin = 0",
                "optional = true\nmin = 10\nmax = 5",
            ),
            "param 'check_io_write_bw_mib_s': `min` 10 is above `max` 5",
        ),
        (
            "min not a number",
            with("min = 0\nmax = 60", "min = nan\nmax = 60"),
            "param 'seconds': `min` NaN is not a finite number",
        ),
        (
            "min on a bool",
            with("default = \"false\"", "default = \"false\"\nmin = 0"),
            "param 'verbose': `min` applies to int, float and size parameters, not bool",
        ),
        (
            "choice default not a choice",
            with("default = \"a\"", "default = \"c\""),
            "'c' is not one of a, b",
        ),
        (
            "duplicate choices",
            with("choices = [\"a\", \"b\"]", "choices = [\"a\", \"a\"]"),
            "param 'mode': `choices` lists 'a' twice",
        ),
        (
            "choices on a string",
            with("default = \"x\"", "default = \"x\"\nchoices = [\"x\"]"),
            "param 'tag': `choices` applies to choice parameters, not string",
        ),
        (
            "choice without choices",
            with("choices = [\"a\", \"b\"]\n", ""),
            "choice parameter 'mode' has no choices",
        ),
        (
            "optional with a default",
            with("default = \"x\"", "default = \"x\"\noptional = true"),
            "param 'tag': has a `default` and `optional = true`",
        ),
        (
            "bad size default",
            format!(
                "{BASE}[[benchmark.param]]\nname = \"block\"\ntype = \"size\"\ndefault = \"lots\"\n"
            ),
            "'lots' is not a size",
        ),
        // launchers, checks, timeouts
        (
            "unknown launcher",
            with("\"mpirun\"]", "\"slurm\"]"),
            "unknown variant `slurm`",
        ),
        (
            "duplicate launcher",
            with("[\"local\", \"mpirun\"]", "[\"local\", \"local\"]"),
            "launchers: 'local' twice",
        ),
        (
            "no launchers",
            with("[\"local\", \"mpirun\"]", "[]"),
            "launchers must not be empty",
        ),
        (
            "unknown check",
            with(
                "name = \"check_io_write_bw_mib_s\"",
                "name = \"check_io_wirte_bw\"",
            ),
            "param 'check_io_wirte_bw': unknown check",
        ),
        (
            "check threshold as a string",
            with(
                "name = \"check_io_write_bw_mib_s\"\ntype = \"float\"\noptional = true\nmin = 0",
                "name = \"check_io_write_bw_mib_s\"\ntype = \"string\"\noptional = true",
            ),
            "param 'check_io_write_bw_mib_s': a check threshold is of type int or float",
        ),
        (
            "zero timeout",
            with("timeout_s = 60", "timeout_s = 0"),
            "timeout_s: must be at least 1 second",
        ),
        (
            "max timeout below the timeout",
            with("max_timeout_s = 600", "max_timeout_s = 30"),
            "max_timeout_s: 30 is below timeout_s 60",
        ),
        // run_as
        (
            "empty run_as",
            with("timeout_s = 60", "timeout_s = 60\nrun_as = \"\""),
            "run_as '' is not a user name",
        ),
        (
            "run_as with a shell word",
            with("timeout_s = 60", "timeout_s = 60\nrun_as = \"bob; rm\""),
            "run_as 'bob; rm' is not a user name",
        ),
        (
            "run_as like an option",
            with("timeout_s = 60", "timeout_s = 60\nrun_as = \"-x\""),
            "run_as: '-x' is not a user name",
        ),
        (
            "run_as a number",
            with("timeout_s = 60", "timeout_s = 60\nrun_as = \"1000\""),
            "run_as: '1000' is not a user name",
        ),
        (
            "run_as an unknown user",
            with(
                "timeout_s = 60",
                "timeout_s = 60\nrun_as = \"no-such-user-benchlake\"",
            ),
            "run_as: user 'no-such-user-benchlake' does not exist on this node",
        ),
        // paths and files
        (
            "within not absolute",
            with(
                "within = [\"/tmp\", \"{scratch_dir}\"]",
                "within = [\"tmp\"]",
            ),
            "within entry 'tmp' must be an absolute directory",
        ),
        (
            "within climbing out",
            with(
                "within = [\"/tmp\", \"{scratch_dir}\"]",
                "within = [\"/tmp/../etc\"]",
            ),
            "within entry '/tmp/../etc' must be an absolute directory",
        ),
        (
            "within an unknown built-in",
            with("{scratch_dir}\"]", "{home}\"]"),
            "within entry '{home}'",
        ),
        (
            "path parameter without within",
            with("within = [\"/tmp\", \"{scratch_dir}\"]\n", ""),
            "path parameter 'dir' must declare `within`",
        ),
        (
            "within on a string",
            with("default = \"x\"", "default = \"x\"\nwithin = [\"/tmp\"]"),
            "`within` is only for path parameters",
        ),
        (
            "stdout as a path",
            with("timeout_s = 60", "timeout_s = 60\nstdout = \"/etc/passwd\""),
            "stdout file",
        ),
        (
            "output outside the task directory",
            with("file = \"result.json\"", "file = \"../result.json\""),
            "output file",
        ),
        (
            "duplicate output",
            format!("{BASE}[[benchmark.output]]\nfile = \"result.json\"\nformat = \"ior\"\n"),
            "output 'result.json': declared twice",
        ),
        (
            "empty output format",
            with("format = \"ior\"", "format = \"\""),
            "output 'result.json': format '' must be",
        ),
        (
            "bad environment name",
            with("env = { TAG = ", "env = { \"BAD NAME\" = "),
            "env: 'BAD NAME' is not a variable name",
        ),
        (
            "unknown placeholder in env",
            with("TAG = \"{tag}\"", "TAG = \"{nope}\""),
            "unknown placeholder '{nope}'",
        ),
        (
            "env_list on a non-string",
            format!("{BASE}[[benchmark.env_list]]\nparam = \"seconds\"\nprefix = \"X_\"\n"),
            "env_list parameter 'seconds' must be of type string",
        ),
    ]
}

#[test]
fn every_bad_catalog_is_refused_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // The base itself loads: each refusal below is its one change.
    let base = dir.path().join("base.toml");
    std::fs::write(&base, BASE).unwrap();
    let c = load_catalog(&base).unwrap();
    assert_eq!(c.benchmarks.len(), 1);
    assert_eq!(c.benchmarks[0].params.len(), 6);
    let bad = bad_catalogs();
    assert!(bad.len() >= 26, "{} bad catalogs", bad.len());
    let mut accepted = Vec::new();
    for (i, (what, text, want)) in bad.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i:02}.toml"));
        std::fs::write(&path, text).unwrap();
        match load_catalog(&path) {
            Ok(_) => accepted.push(*what),
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains(&path.display().to_string()),
                    "{what}: the message names no file: {e}"
                );
                assert!(e.contains(want), "{what}: got '{e}', want '{want}'");
            }
        }
    }
    assert!(accepted.is_empty(), "bad catalogs accepted: {accepted:?}");
}

#[test]
fn the_shipped_catalogs_load() {
    let b = builtin_catalog().unwrap();
    assert!(b.get("sleep").is_some() && b.get("hostinfo").is_some());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let c = load_catalog(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!c.benchmarks.is_empty(), "{}", p.display());
            n += 1;
        }
    }
    assert!(n >= 2, "{n} catalogs in {}", dir.display());
    let ior = load_catalog(&dir.join("ior.toml")).unwrap();
    assert_eq!(
        ior.benchmarks
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>(),
        ["ior", "mdtest"]
    );
}
