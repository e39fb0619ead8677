//! The configuration file (`--config FILE`, `BENCHLAKE_CONFIG`): every flag of
//! every command may be set in TOML. This module owns reading it and merging
//! it under the environment and the command line (file < environment < flag),
//! and `benchlake config show`.
//!
//! The flags stay defined once, in the clap structs, with their defaults and
//! environment variables; the file is turned into command-line arguments for
//! the flags that are neither on the command line nor set in the environment,
//! before clap parses. So every flag — including ones added later — can be set
//! in the file, with the same validation as on the command line.
//!
//! Layout: the table `[all]` (or top-level keys) applies to every command that
//! has the flag (`[all]` `coordinator = "c1:7700,c2:7700"`, `log = "info"`; the
//! table is needed for `coordinator`, which is also a command); a table per command
//! (`[coordinator]`, `[agent]`, `[worker]`, `[up]`) and per subcommand
//! (`[run.submit]`, `[schedule.create]`) applies to that command and the
//! commands under it, the more specific table winning. Keys are the long flag
//! names, with `-` or `_` (`lease_timeout_ms` or `lease-timeout-ms`); lists
//! repeat a flag; `true` sets a switch. A key no command knows is an error that
//! names the file and the key, and so is a key in a command's own table that
//! the command does not have.
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgAction, Command};

/// The environment variable naming the configuration file.
pub const ENV: &str = "BENCHLAKE_CONFIG";

/// The table whose keys apply to every command that has the flag.
const ALL: &str = "all";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("configuration file {path}: {key}: {message}")]
    Key {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("--config needs a file name")]
    NoPath,
}

/// Where a flag's effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    Env,
    Flag,
    Unset,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File => "file",
            Source::Env => "environment",
            Source::Flag => "command line",
            Source::Unset => "unset",
        }
    }
}

/// The command line with the file's settings added.
#[derive(Debug)]
pub struct Applied {
    pub argv: Vec<OsString>,
    pub file: Option<PathBuf>,
    /// Arg ids of the leaf command set from the file.
    pub from_file: BTreeSet<String>,
}

/// The configuration file named on `argv` (the global `--config F`,
/// `--config=F`: [`config_flag`]) or in the environment.
fn config_path(root: &Command, argv: &[OsString]) -> Result<Option<PathBuf>, ConfigError> {
    if let Some(p) = config_flag(root, argv)? {
        return Ok(Some(p));
    }
    Ok(std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from))
}

/// The pre-scan: the configuration file the global `--config` names on
/// `argv` ([`global_flag`]), before clap parses; a command's own `--config`
/// is not it.
fn config_flag(root: &Command, argv: &[OsString]) -> Result<Option<PathBuf>, ConfigError> {
    let named = argv.iter().skip(1).any(|a| {
        let s = a.to_string_lossy();
        s == "--config" || s.starts_with("--config=")
    });
    if !named {
        // Most command lines: no copy of the tree to build.
        return Ok(None);
    }
    let mut built = root.clone();
    built.build();
    match global_flag(&built, argv, "config") {
        Some(Some(p)) => Ok(Some(PathBuf::from(p))),
        Some(None) => Err(ConfigError::NoPath),
        None => Ok(None),
    }
}

/// The value of the global flag `--LONG` on `argv`, found where clap takes
/// it: before the subcommand or after it, at a command whose `--LONG` is the
/// global one. A command's own flag of that name (`replay dimemas --config
/// FILE.cfg`: a Dimemas configuration) is that command's, and so is what
/// follows the first value of a trailing argument list (`pio ARGS…`,
/// `config show COMMAND…`). `Some(None)`: the flag ends `argv` without its
/// value. `built` is the command tree after [`Command::build`], so every
/// command holds the globals it inherits.
pub fn global_flag(built: &Command, argv: &[OsString], long: &str) -> Option<Option<OsString>> {
    let flag = format!("--{long}");
    let with_value = format!("--{long}=");
    let mut cmd = built;
    // A positional value seen at `cmd`: no subcommand follows it.
    let mut positional = false;
    let mut i = 1;
    while i < argv.len() {
        let s = argv[i].to_string_lossy();
        if s == "--" {
            break;
        }
        if s == flag || s.starts_with(&with_value) {
            let own = cmd.get_arguments().find(|a| a.get_long() == Some(long));
            if own.is_some_and(|a| a.is_global_set()) {
                return Some(match s.strip_prefix(&with_value) {
                    Some(v) => Some(OsString::from(v)),
                    None => argv.get(i + 1).cloned(),
                });
            }
            // The command's own flag (and its value), or one clap refuses.
            i += if takes_value(cmd, &s) { 2 } else { 1 };
            continue;
        }
        if s.len() > 1 && s.starts_with('-') {
            if find_arg(cmd, &s).is_some() {
                i += if takes_value(cmd, &s) { 2 } else { 1 };
                continue;
            }
            if !cmd
                .get_positionals()
                .any(|a| a.is_allow_hyphen_values_set())
            {
                // Unknown here: clap refuses it.
                i += 1;
                continue;
            }
            // A value of a positional that takes hyphen values.
        }
        if !positional && let Some(sub) = cmd.find_subcommand(s.as_ref()) {
            cmd = sub;
            i += 1;
            continue;
        }
        positional = true;
        if cmd.get_positionals().any(|a| a.is_trailing_var_arg_set()) {
            // Everything from here on is the trailing list's.
            break;
        }
        i += 1;
    }
    None
}

/// The argument of `cmd` (globals included once built) that `token` names
/// (`--long`, `--long=v`, `-s`).
fn find_arg<'a>(cmd: &'a Command, token: &str) -> Option<&'a clap::Arg> {
    if let Some(long) = token.strip_prefix("--") {
        let long = long.split_once('=').map_or(long, |(l, _)| l);
        cmd.get_arguments().find(|a| a.get_long() == Some(long))
    } else if let Some(short) = token.strip_prefix('-') {
        let mut cs = short.chars();
        match (cs.next(), cs.next()) {
            (Some(c), None) => cmd.get_arguments().find(|a| a.get_short() == Some(c)),
            _ => None,
        }
    } else {
        None
    }
}

/// Whether `token` is an argument of `cmd` whose value is the next token.
fn takes_value(cmd: &Command, token: &str) -> bool {
    if token.starts_with("--") && token.contains('=') {
        return false;
    }
    find_arg(cmd, token).is_some_and(|a| a.get_action().takes_values())
}

/// The subcommand path of `argv` (`["run", "submit"]`) and, for the leaf, the
/// index in `argv` right after its name.
fn command_path(root: &Command, argv: &[OsString]) -> (Vec<String>, usize) {
    let mut path = Vec::new();
    let mut cmd = root;
    let mut at = 1;
    let mut i = 1;
    while i < argv.len() {
        let s = argv[i].to_string_lossy();
        if s == "--" {
            break;
        }
        if s.starts_with('-') {
            i += if takes_value(cmd, &s) { 2 } else { 1 };
            continue;
        }
        match cmd.find_subcommand(s.as_ref()) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                cmd = sub;
                i += 1;
                at = i;
            }
            None => break,
        }
    }
    (path, at)
}

fn leaf<'a>(root: &'a Command, path: &[String]) -> &'a Command {
    let mut cmd = root;
    for p in path {
        match cmd.find_subcommand(p) {
            Some(c) => cmd = c,
            None => break,
        }
    }
    cmd
}

/// Every long flag name of `cmd` and the commands under it.
fn all_longs(cmd: &Command, out: &mut BTreeSet<String>) {
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            out.insert(l.to_string());
        }
    }
    for s in cmd.get_subcommands() {
        all_longs(s, out);
    }
}

fn norm(key: &str) -> String {
    key.replace('_', "-")
}

/// Whether the command line already sets the flag `long` (or its short).
fn on_command_line(argv: &[OsString], long: &str, short: Option<char>) -> bool {
    argv.iter().skip(1).any(|a| {
        let s = a.to_string_lossy();
        s == format!("--{long}")
            || s.starts_with(&format!("--{long}="))
            || short.is_some_and(|c| s == format!("-{c}"))
    })
}

/// The TOML value as the flag's command-line values.
fn values(
    path: &Path,
    key: &str,
    v: &toml::Value,
    switch: bool,
) -> Result<Vec<String>, ConfigError> {
    let bad = |message: String| ConfigError::Key {
        path: path.to_path_buf(),
        key: key.to_string(),
        message,
    };
    let scalar = |v: &toml::Value| -> Result<String, ConfigError> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(bad(format!(
                "expected a string, number or boolean, found {}",
                other.type_str()
            ))),
        }
    };
    if switch {
        return match v {
            toml::Value::Boolean(true) => Ok(vec![String::new()]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            other => Err(bad(format!(
                "is a switch: expected true or false, found {}",
                other.type_str()
            ))),
        };
    }
    match v {
        toml::Value::Array(items) => items.iter().map(scalar).collect(),
        other => Ok(vec![scalar(other)?]),
    }
}

/// Reads the configuration file (if any) and adds its settings to `argv` for
/// the command `argv` names, under the environment and the command line.
pub fn apply(root: &Command, argv: Vec<OsString>) -> Result<Applied, ConfigError> {
    let Some(path) = config_path(root, &argv)? else {
        return Ok(Applied {
            argv,
            file: None,
            from_file: BTreeSet::new(),
        });
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.clone(),
        message: e.to_string().trim_end().replace('\n', " "),
    })?;
    let mut root = root.clone();
    root.build();
    let mut known = BTreeSet::new();
    all_longs(&root, &mut known);
    check_keys(&path, &root, &table, &known, "")?;

    let (cmd_path, at) = command_path(&root, &argv);
    let leaf_cmd = leaf(&root, &cmd_path);
    if leaf_cmd.get_name() == "pio" {
        // pio parses its own arguments.
        return Ok(Applied {
            argv,
            file: Some(path),
            from_file: BTreeSet::new(),
        });
    }
    // Settings from the least to the most specific table.
    let mut settings: BTreeMap<String, (String, toml::Value)> = BTreeMap::new();
    if let Some(all) = table.get(ALL).and_then(|v| v.as_table()) {
        for (k, v) in all {
            settings.insert(norm(k), (format!("{ALL}.{k}"), v.clone()));
        }
    }
    let mut t = Some(&table);
    let mut section = String::new();
    for depth in 0..=cmd_path.len() {
        let Some(cur) = t else { break };
        for (k, v) in cur {
            if !v.is_table() {
                let name = if section.is_empty() {
                    k.clone()
                } else {
                    format!("{section}.{k}")
                };
                settings.insert(norm(k), (name, v.clone()));
            }
        }
        if depth < cmd_path.len() {
            let next = &cmd_path[depth];
            section = if section.is_empty() {
                next.clone()
            } else {
                format!("{section}.{next}")
            };
            t = cur.get(next).and_then(|v| v.as_table());
        }
    }
    let mut added: Vec<OsString> = Vec::new();
    let mut from_file = BTreeSet::new();
    for (long, (name, v)) in &settings {
        let Some(arg) = leaf_cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
        else {
            // Set for other commands (a top-level or parent-table key).
            continue;
        };
        if long == "config"
            || on_command_line(&argv, long, arg.get_short())
            || arg
                .get_env()
                .is_some_and(|e| std::env::var_os(e).is_some_and(|v| !v.is_empty()))
        {
            continue;
        }
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        for val in values(&path, name, v, switch)? {
            added.push(if switch {
                format!("--{long}").into()
            } else {
                format!("--{long}={val}").into()
            });
        }
        from_file.insert(arg.get_id().to_string());
    }
    let mut out = argv;
    let tail = out.split_off(at.min(out.len()));
    out.extend(added);
    out.extend(tail);
    Ok(Applied {
        argv: out,
        file: Some(path),
        from_file,
    })
}

/// Refuses keys no command knows, and keys in a command's table that the
/// command (and the commands under it) does not have.
fn check_keys(
    path: &Path,
    cmd: &Command,
    table: &toml::Table,
    known: &BTreeSet<String>,
    section: &str,
) -> Result<(), ConfigError> {
    let mut here = BTreeSet::new();
    all_longs(cmd, &mut here);
    for (k, v) in table {
        let name = if section.is_empty() {
            k.clone()
        } else {
            format!("{section}.{k}")
        };
        let unknown = |message: String| ConfigError::Key {
            path: path.to_path_buf(),
            key: name.clone(),
            message,
        };
        match v {
            toml::Value::Table(sub) if section.is_empty() && k == ALL => {
                for (ak, av) in sub {
                    if av.is_table() || !known.contains(&norm(ak)) {
                        return Err(ConfigError::Key {
                            path: path.to_path_buf(),
                            key: format!("{ALL}.{ak}"),
                            message: "no command has this flag".into(),
                        });
                    }
                }
            }
            toml::Value::Table(sub) => match cmd.find_subcommand(k) {
                Some(c) => check_keys(path, c, sub, known, &name)?,
                None if here.contains(&norm(k)) => {
                    return Err(unknown("expected a value, found a table".into()));
                }
                None => {
                    let cmds: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                    return Err(unknown(format!(
                        "no command '{k}' here (commands: {})",
                        cmds.join(", ")
                    )));
                }
            },
            _ => {
                let set = if section.is_empty() { known } else { &here };
                if !set.contains(&norm(k)) {
                    let what = if section.is_empty() {
                        "no command has this flag".to_string()
                    } else {
                        format!(
                            "`benchlake {}` has no --{}",
                            section.replace('.', " "),
                            norm(k)
                        )
                    };
                    return Err(unknown(what));
                }
            }
        }
    }
    Ok(())
}

/// Whether a flag holds a secret (its value is never printed).
fn is_secret(id: &str) -> bool {
    let id = id.to_ascii_lowercase();
    id.contains("secret")
        || id.contains("password")
        || (id.contains("token") && !id.ends_with("file"))
        || id.contains("access_key")
}

/// A value for display: secrets and URL passwords hidden.
fn shown(id: &str, v: &str) -> String {
    if is_secret(id) && !v.is_empty() {
        return "\"***\"".into();
    }
    // A webhook URL's path may be its secret (Slack-style): NAME=scheme://host/…
    if id == "webhooks" {
        let (name, url) = v.split_once('=').unwrap_or(("", v));
        let url = reqwest_url_redacted(url);
        return toml::Value::String(format!("{name}={url}")).to_string();
    }
    if v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok_and(f64::is_finite) {
        return v.to_string();
    }
    let v = benchlake_coordinator::store_pg::redact(v);
    toml::Value::String(v).to_string()
}

/// A webhook URL without its path, query and credentials.
fn reqwest_url_redacted(url: &str) -> String {
    match benchlake_coordinator::notify::parse_url("webhook", url) {
        Ok(u) => benchlake_coordinator::notify::redact_url(&u),
        Err(_) => "***".into(),
    }
}

/// `benchlake config show COMMAND…`: the effective value of every flag of the
/// command, with where it came from, as TOML for that command's table.
pub fn show(root: &Command, args: &[String]) -> Result<String, anyhow::Error> {
    let mut argv: Vec<OsString> = vec!["benchlake".into()];
    argv.extend(args.iter().map(OsString::from));
    let applied = apply(root, argv)?;
    // Values are checked as the command would check them; only arguments the
    // command needs to run (a benchmark name, files) may be missing here.
    if let Err(e) = root.clone().try_get_matches_from(&applied.argv) {
        use clap::error::ErrorKind::*;
        if !matches!(
            e.kind(),
            MissingRequiredArgument
                | MissingSubcommand
                | DisplayHelpOnMissingArgumentOrSubcommand
                | DisplayHelp
                | DisplayVersion
        ) {
            anyhow::bail!("{}", e.to_string().trim_end());
        }
    }
    let mut built = root.clone().ignore_errors(true);
    built.build();
    let (cmd_path, _) = command_path(&built, &applied.argv);
    let m = built
        .clone()
        .try_get_matches_from(&applied.argv)
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
    let mut matches = &m;
    for p in &cmd_path {
        match matches.subcommand_matches(p) {
            Some(sub) => matches = sub,
            None => break,
        }
    }
    let cmd = leaf(&built, &cmd_path);
    let mut out = String::new();
    out.push_str(&format!(
        "# benchlake {}: effective configuration{}\n",
        if cmd_path.is_empty() {
            "(global)".to_string()
        } else {
            cmd_path.join(" ")
        },
        match &applied.file {
            Some(f) => format!(" (file {})", f.display()),
            None => " (no configuration file)".into(),
        }
    ));
    if !cmd_path.is_empty() {
        out.push_str(&format!("[{}]\n", cmd_path.join(".")));
    }
    for a in cmd.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        let id = a.get_id().as_str();
        if matches!(long, "help" | "version" | "config") || a.is_hide_set() {
            continue;
        }
        let source = if applied.from_file.contains(id) {
            Source::File
        } else {
            match matches.value_source(id) {
                Some(clap::parser::ValueSource::DefaultValue) => Source::Default,
                Some(clap::parser::ValueSource::EnvVariable) => Source::Env,
                Some(clap::parser::ValueSource::CommandLine) => Source::Flag,
                _ => Source::Unset,
            }
        };
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|vs| vs.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let key = long.replace('-', "_");
        let env = a
            .get_env()
            .map(|e| format!(", env {}", e.to_string_lossy()))
            .unwrap_or_default();
        let line = match (source, raw.as_slice()) {
            (Source::Unset, _) | (_, []) => format!("# {key} = (unset{env})"),
            (_, [one]) if !a.get_action().takes_values() => {
                format!("{key} = {one}  # {}{env}", source.as_str())
            }
            (_, [one]) if a.get_num_args().is_none_or(|n| n.max_values() <= 1) => {
                format!("{key} = {}  # {}{env}", shown(id, one), source.as_str())
            }
            (_, many) => format!(
                "{key} = [{}]  # {}{env}",
                many.iter()
                    .map(|v| shown(id, v))
                    .collect::<Vec<_>>()
                    .join(", "),
                source.as_str()
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("benchlake")
            .arg(Arg::new("log").long("log").global(true))
            .arg(Arg::new("config").long("config").global(true))
            .subcommand(
                Command::new("coordinator")
                    .arg(
                        Arg::new("listen")
                            .long("listen")
                            .default_value("0.0.0.0:7700"),
                    )
                    .arg(
                        Arg::new("lease_ms")
                            .long("lease-ms")
                            .env("BENCHLAKE_TEST_CFG_LEASE"),
                    )
                    .arg(Arg::new("open").long("open").action(ArgAction::SetTrue))
                    // Set in the environment by one test only (tests share it).
                    .arg(
                        Arg::new("tick_ms")
                            .long("tick-ms")
                            .env("BENCHLAKE_TEST_CFG_TICK"),
                    )
                    .arg(Arg::new("token").long("token")),
            )
            .subcommand(
                Command::new("run").subcommand(
                    Command::new("submit")
                        .arg(Arg::new("coordinator").long("coordinator"))
                        .arg(
                            Arg::new("param")
                                .long("param")
                                .short('p')
                                .action(ArgAction::Append),
                        )
                        .arg(Arg::new("benchmark").required(true)),
                ),
            )
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn argv(f: &tempfile::NamedTempFile, rest: &[&str]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["benchlake".into(), "--config".into(), f.path().into()];
        v.extend(rest.iter().map(OsString::from));
        v
    }

    fn strs(v: &[OsString]) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn file_settings_go_under_flags_and_the_environment() {
        let f = file(
            "log = \"debug\"\n[all]\ncoordinator = \"c1:7700,c2:7700\"\n[coordinator]\nlisten = \"127.0.0.1:9\"\nlease_ms = 2000\ntick_ms = 5\nopen = true\n[run.submit]\nparam = [\"a=1\", \"b=2\"]\n",
        );
        let a = apply(&cli(), argv(&f, &["coordinator"])).unwrap();
        let s = strs(&a.argv);
        assert!(s.contains(&"--listen=127.0.0.1:9".to_string()), "{s:?}");
        assert!(s.contains(&"--lease-ms=2000".to_string()), "{s:?}");
        assert!(s.contains(&"--open".to_string()), "{s:?}");
        assert!(s.contains(&"--log=debug".to_string()), "{s:?}");
        // The top-level `coordinator` flag is not a flag of this command.
        assert!(!s.iter().any(|x| x.starts_with("--coordinator")), "{s:?}");
        let m = cli().try_get_matches_from(&a.argv).unwrap();
        let c = m.subcommand_matches("coordinator").unwrap();
        assert_eq!(c.get_one::<String>("listen").unwrap(), "127.0.0.1:9");
        assert!(c.get_flag("open"));

        // A flag on the command line wins.
        let a = apply(&cli(), argv(&f, &["coordinator", "--listen", "x:1"])).unwrap();
        assert!(!strs(&a.argv).iter().any(|x| x.starts_with("--listen=")));
        // So does the environment.
        assert!(strs(&a.argv).contains(&"--tick-ms=5".to_string()));
        unsafe { std::env::set_var("BENCHLAKE_TEST_CFG_TICK", "7") };
        let a = apply(&cli(), argv(&f, &["coordinator"])).unwrap();
        unsafe { std::env::remove_var("BENCHLAKE_TEST_CFG_TICK") };
        assert!(!strs(&a.argv).iter().any(|x| x.starts_with("--tick-ms")));

        // Nested tables, lists, and values before the positional argument.
        let a = apply(
            &cli(),
            argv(&f, &["--log", "warn", "run", "submit", "sleep"]),
        )
        .unwrap();
        let m = cli().try_get_matches_from(&a.argv).unwrap();
        let sub = m
            .subcommand_matches("run")
            .unwrap()
            .subcommand_matches("submit")
            .unwrap();
        let p: Vec<&String> = sub.get_many::<String>("param").unwrap().collect();
        assert_eq!(p, ["a=1", "b=2"]);
        assert_eq!(
            sub.get_one::<String>("coordinator").unwrap(),
            "c1:7700,c2:7700"
        );
        assert_eq!(sub.get_one::<String>("benchmark").unwrap(), "sleep");
        assert_eq!(m.get_one::<String>("log").unwrap(), "warn");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_file_and_the_key() {
        let e = apply(&cli(), argv(&file("lisen = 1\n"), &["coordinator"])).unwrap_err();
        assert!(
            e.to_string().contains("lisen: no command has this flag"),
            "{e}"
        );
        let e = apply(
            &cli(),
            argv(
                &file("[coordinator]\ncoordinator = \"x\"\n"),
                &["coordinator"],
            ),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("coordinator.coordinator: `benchlake coordinator` has no --coordinator"),
            "{e}"
        );
        let e = apply(
            &cli(),
            argv(&file("[cordinator]\nlisten = \"x\"\n"), &["coordinator"]),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("cordinator: no command 'cordinator' here"),
            "{e}"
        );
        let e = apply(
            &cli(),
            argv(&file("[coordinator]\nopen = \"yes\"\n"), &["coordinator"]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("coordinator.open: is a switch"),
            "{e}"
        );
        let f = file("[coordinator]\nlisten = \n");
        let e = apply(&cli(), argv(&f, &["coordinator"])).unwrap_err();
        assert!(
            e.to_string().contains(&f.path().display().to_string()),
            "{e}"
        );
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = apply(
            &cli(),
            vec![
                "benchlake".into(),
                "--config".into(),
                "/nonexistent/x.toml".into(),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.toml"), "{e}");
    }

    #[test]
    fn show_prints_sources_and_hides_secrets() {
        let f =
            file("[coordinator]\ntoken = \"s3cr3t\"\nlisten = \"127.0.0.1:9\"\nlease_ms = 250\n");
        let out = show(
            &cli(),
            &[
                "--config".into(),
                f.path().display().to_string(),
                "coordinator".into(),
            ],
        )
        .unwrap();
        assert!(out.contains("[coordinator]"), "{out}");
        assert!(out.contains("listen = \"127.0.0.1:9\"  # file"), "{out}");
        assert!(out.contains("token = \"***\"  # file"), "{out}");
        assert!(!out.contains("s3cr3t"), "{out}");
        assert!(
            out.contains("lease_ms = 250  # file, env BENCHLAKE_TEST_CFG_LEASE"),
            "{out}"
        );
        let out = show(&cli(), &["coordinator".into()]).unwrap();
        assert!(out.contains("(no configuration file)"), "{out}");
        assert!(
            out.contains("listen = \"0.0.0.0:7700\"  # default"),
            "{out}"
        );
        assert!(
            out.contains("# lease_ms = (unset, env BENCHLAKE_TEST_CFG_LEASE)"),
            "{out}"
        );
        // A value the command would refuse is refused here too.
        let bad = file("[coordinator]\nopen = true\nlisten = [\"a\", \"b\"]\n");
        let e = show(
            &cli(),
            &[
                "--config".into(),
                bad.path().display().to_string(),
                "coordinator".into(),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().contains("--listen"), "{e}");
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// Every command of `cmd`'s tree with its path (`["replay", "dimemas"]`),
    /// the root's own `help` subcommands left out (clap gives them no
    /// globals).
    fn commands<'a>(
        cmd: &'a Command,
        path: Vec<String>,
        out: &mut Vec<(Vec<String>, &'a Command)>,
    ) {
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            out.push((p.clone(), sub));
            commands(sub, p, out);
        }
    }

    /// The command tree of `benchlake`: no subcommand flag that has a global
    /// flag's name (`replay dimemas --config FILE.cfg`, a Dimemas
    /// configuration) is taken for the global one by the pre-scan, wherever
    /// it stands after the subcommand; the global one is still found before
    /// the subcommand, and after it in every command that has no flag of its
    /// own of that name.
    #[test]
    fn the_pre_scan_takes_only_global_flags_in_the_real_command_tree() {
        use clap::CommandFactory;
        let unbuilt = crate::Cli::command();
        let mut root = unbuilt.clone();
        root.build();
        let globals: Vec<String> = root
            .get_arguments()
            .filter(|a| a.is_global_set())
            .filter_map(|a| a.get_long())
            .map(str::to_string)
            .collect();
        assert!(globals.contains(&"config".to_string()), "{globals:?}");
        let mut all = Vec::new();
        commands(&root, Vec::new(), &mut all);
        let mut shadowing = Vec::new();
        for (path, cmd) in &all {
            for long in &globals {
                let mine = |v: &[&str]| {
                    let mut argv = vec!["benchlake".to_string()];
                    argv.extend(path.iter().cloned());
                    argv.extend(v.iter().map(|s| s.to_string()));
                    argv.into_iter().map(OsString::from).collect::<Vec<_>>()
                };
                let own = cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(long.as_str()));
                let flag = format!("--{long}");
                let flag = flag.as_str();
                let eq = format!("--{long}=sub-value");
                let eq = eq.as_str();
                let global = os(&["benchlake", flag, "global-value"]);
                let before = |argv: Vec<OsString>| {
                    let mut v = global.clone();
                    v.extend(argv.into_iter().skip(1));
                    v
                };
                match own {
                    Some(a) if !a.is_global_set() => {
                        shadowing.push(format!("{} --{long}", path.join(" ")));
                        for argv in [
                            mine(&[flag, "sub-value"]),
                            mine(&[eq]),
                            mine(&["positional", flag, "sub-value"]),
                            mine(&[flag, "sub-value", "positional"]),
                        ] {
                            assert_eq!(
                                global_flag(&root, &argv, long),
                                None,
                                "{argv:?}: the subcommand's own --{long} taken for the global one"
                            );
                            if long == "config" {
                                // What the configuration-file loader reads.
                                assert_eq!(
                                    config_flag(&unbuilt, &argv).unwrap(),
                                    None,
                                    "{argv:?}: the subcommand's own --config read as the file"
                                );
                                assert_eq!(
                                    config_flag(&unbuilt, &before(argv.clone())).unwrap(),
                                    Some(PathBuf::from("global-value")),
                                    "{argv:?}"
                                );
                            }
                            // The global one before the subcommand is still found.
                            assert_eq!(
                                global_flag(&root, &before(argv.clone()), long),
                                Some(Some("global-value".into())),
                                "{argv:?}"
                            );
                        }
                    }
                    Some(_) => {
                        // The global one after the subcommand is the global one
                        // (clap takes it there too).
                        let argv = mine(&[flag, "after"]);
                        assert_eq!(
                            global_flag(&root, &argv, long),
                            Some(Some("after".into())),
                            "{argv:?}"
                        );
                        if long == "config" {
                            assert_eq!(
                                config_flag(&unbuilt, &argv).unwrap(),
                                Some(PathBuf::from("after")),
                                "{argv:?}"
                            );
                        }
                    }
                    None => panic!("{}: the global --{long} not propagated", path.join(" ")),
                }
            }
        }
        // The walk did meet the flags that share the name (so it walks the
        // tree): the Dimemas configuration of the offline and the cluster
        // replay.
        for known in ["replay dimemas --config", "replay submit --config"] {
            assert!(
                shadowing.iter().any(|s| s == known),
                "{known} not found among {shadowing:?}"
            );
        }
    }

    /// `replay dimemas TRACE --config FILE.cfg` (docs/replay.md): the file
    /// is the replay's, not a configuration file read as TOML; clap gives it
    /// to the replay. A global `--config` before the subcommand is still one.
    #[test]
    fn a_dimemas_config_is_not_the_configuration_file() {
        use clap::{CommandFactory, Parser};
        let cfg = file("SDDFA\n/* not TOML */\n");
        let c = cfg.path().display().to_string();
        let argv = os(&[
            "benchlake",
            "replay",
            "dimemas",
            "t.dim",
            "--config",
            c.as_str(),
        ]);
        let mut root = crate::Cli::command();
        root.build();
        assert_eq!(global_flag(&root, &argv, "config"), None);
        if std::env::var_os(ENV).is_none() {
            let a = apply(&crate::Cli::command(), argv.clone()).unwrap();
            assert_eq!(a.file, None);
            assert_eq!(a.argv, argv);
        }
        let cli = crate::Cli::try_parse_from(&argv).unwrap();
        match cli.cmd {
            crate::Cmd::Replay(crate::replay::ReplayCmd::Dimemas(d)) => {
                assert_eq!(d.config, Some(cfg.path().to_path_buf()));
            }
            other => panic!("{other:?}"),
        }
        let site = file("log = \"debug\"\n");
        let mut argv = os(&["benchlake", "--config"]);
        argv.push(site.path().into());
        argv.extend(os(&["replay", "dimemas", "t.dim", "--config", c.as_str()]));
        let a = apply(&crate::Cli::command(), argv).unwrap();
        assert_eq!(a.file.as_deref(), Some(site.path()));
        assert!(
            strs(&a.argv).contains(&"--log=debug".to_string()),
            "{:?}",
            a.argv
        );
        // `config show` of such a command line does not read the .cfg either.
        let out = show(
            &crate::Cli::command(),
            &[
                "replay".into(),
                "dimemas".into(),
                "t.dim".into(),
                "--config".into(),
                c,
            ],
        );
        assert!(out.is_ok(), "{out:?}");
    }
}
