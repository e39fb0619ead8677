use super::*;

#[test]
fn hmac_sha256_matches_rfc_4231() {
    // RFC 4231 test case 2.
    assert_eq!(
        sign(b"Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // Test case 6: a key longer than the block.
    assert_eq!(
        sign(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        ),
        "sha256=60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    assert_eq!(timestamped(1700000000, b"{}"), b"1700000000.{}");
}

#[test]
fn backoff_doubles_is_capped_and_jittered() {
    assert_eq!(backoff_ms(2_000, 600_000, 1, 1.0), 2_000);
    assert_eq!(backoff_ms(2_000, 600_000, 2, 1.0), 4_000);
    assert_eq!(backoff_ms(2_000, 600_000, 5, 1.0), 32_000);
    assert_eq!(backoff_ms(2_000, 600_000, 40, 1.0), 600_000);
    assert_eq!(backoff_ms(2_000, 600_000, 2, 0.5), 2_000);
    // Jitter stays in [0.5, 1].
    assert_eq!(backoff_ms(2_000, 600_000, 1, 0.0), 1_000);
    assert_eq!(backoff_ms(2_000, 600_000, 1, 7.0), 2_000);
}

#[test]
fn statuses_are_classified() {
    assert_eq!(classify(200), Attempt::Delivered(200));
    assert_eq!(classify(204), Attempt::Delivered(204));
    assert_eq!(classify(404), Attempt::Rejected(404));
    assert_eq!(classify(401), Attempt::Rejected(401));
    assert!(matches!(classify(408), Attempt::Failed(..)));
    assert!(matches!(classify(429), Attempt::Failed(..)));
    assert!(matches!(classify(500), Attempt::Failed(..)));
    assert!(matches!(classify(503), Attempt::Failed(..)));
    assert!(matches!(classify(302), Attempt::Failed(..)));
}

#[test]
fn urls_and_names_are_checked() {
    assert!(parse_url("webhook", "https://hooks.example/x?y=1").is_ok());
    assert!(parse_url("webhook", "http://127.0.0.1:9/").is_ok());
    for bad in [
        "ftp://h/",
        "file:///etc/passwd",
        "http://u:p@h/",
        "nothing",
        "unix:/x",
    ] {
        let e = parse_url("webhook", bad).unwrap_err();
        assert!(e.starts_with("webhook: "), "{e}");
    }
    assert!(check_name("n", "ops-team_1.x").is_ok());
    assert!(check_name("n", "").is_err());
    assert!(check_name("n", "a b").is_err());
    assert!(check_name("n", "a=b").is_err());
    let u = parse_url("w", "https://hooks.slack.example/services/T0/B0/SECRET").unwrap();
    assert_eq!(redact_url(&u), "https://hooks.slack.example/…");
    let w = Webhook {
        name: "ops".into(),
        url: u,
        secret: Some(b"s3cr3t-value".to_vec()),
    };
    let shown = format!("{w:?}");
    assert!(
        !shown.contains("SECRET") && !shown.contains("s3cr3t"),
        "{shown}"
    );
}

#[test]
fn config_checks_defaults_and_names() {
    let mut cfg = NotifyConfig {
        webhooks: vec![Webhook {
            name: "ops".into(),
            url: parse_url("w", "http://127.0.0.1:1/").unwrap(),
            secret: None,
        }],
        defaults: vec!["ops".into()],
        ..Default::default()
    };
    assert!(cfg.check().is_ok());
    assert!(cfg.check_names("schedule.notify", &["ops".into()]).is_ok());
    let e = cfg
        .check_names("schedule.notify", &["mail".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("schedule.notify") && e.contains("mail") && e.contains("ops"),
        "{e}"
    );
    cfg.defaults.push("nope".into());
    assert!(cfg.check().unwrap_err().contains("nope"));
    cfg.defaults.pop();
    cfg.webhooks.push(cfg.webhooks[0].clone());
    assert!(cfg.check().unwrap_err().contains("twice"));
}

fn facts(state: RunState, checks: &[(&str, &str)], nodes: &[(&str, &str, &str)]) -> RunFacts {
    let spec = Spec {
        benchmark: "pio".into(),
        params: Default::default(),
        nodes: Nodes::default(),
        launcher: benchlake_core::bench::LauncherKind::Local,
        max_attempts: 1,
        timeout_s: 60,
        slurm: Default::default(),
    };
    let mut run = RunRow::new(
        "01RUN".into(),
        spec,
        "io",
        Origin::default(),
        1_700_000_000_000,
    );
    run.state = state;
    let row = |c: &str, s: &str| CheckRow {
        check: c.into(),
        status: s.into(),
        value: Some(1.5),
        reference: Some(100.0),
        unit: "MiB/s".into(),
        message: format!("{c} {s}"),
        ..Default::default()
    };
    RunFacts {
        run,
        schedule_name: None,
        agents: vec!["a1".into(), "a2".into()],
        checks: checks.iter().map(|(c, s)| row(c, s)).collect(),
        nodes: nodes
            .iter()
            .map(|(n, c, s)| (n.to_string(), row(c, s)))
            .collect(),
    }
}

#[test]
fn events_verdicts_and_failing_nodes() {
    let f = facts(RunState::Succeeded, &[("io.write", "PASS")], &[]);
    assert_eq!(f.event(), None);
    let f = facts(RunState::Succeeded, &[], &[]);
    assert_eq!(f.event(), None);
    let f = facts(RunState::Failed, &[], &[]);
    assert_eq!(f.event(), Some("run.failed"));
    let f = facts(
        RunState::Succeeded,
        &[("io.write", "FAIL"), ("io.read", "ERROR")],
        &[],
    );
    assert_eq!(f.event(), Some("verdict.fail"));
    assert_eq!(f.failing_checks().len(), 2);
    let nodes = f.failing_nodes();
    assert_eq!(
        nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        ["a1", "a2"]
    );
    let f = facts(
        RunState::Succeeded,
        &[("io.write", "PASS")],
        &[("n1", "node.cores", "PASS"), ("n2", "node.cores", "ERROR")],
    );
    assert_eq!(f.event(), Some("verdict.error"));
    // A REGRESSION (even beside an ERROR) is notified and failing.
    let g = facts(
        RunState::Succeeded,
        &[("a", "ERROR"), ("b", "REGRESSION")],
        &[],
    );
    assert_eq!(
        (g.event(), g.failing_checks().len()),
        (Some("verdict.regression"), 2)
    );
    let nodes = f.failing_nodes();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].node, "n2");
    assert_eq!(nodes[0].checks[0].check, "node.cores");
    let body = payload(
        &f,
        "verdict.error",
        "01DEL",
        "ops",
        Some("https://b.example/"),
        1_700_000_000_000,
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["run"]["run_id"], "01RUN");
    assert_eq!(v["run"]["verdict"], "ERROR");
    assert_eq!(v["delivery_id"], "01DEL");
    assert_eq!(v["links"]["run"], "https://b.example/runs/01RUN");
    assert_eq!(v["failing_nodes"][0]["node"], "n2");
    assert_eq!(v["time"], "2023-11-14T22:13:20.000Z");
}

/// Not enough history and a disturbed run are no findings: nothing is
/// sent, and they are not among a failing run's failing checks.
#[test]
fn undecided_verdicts_are_not_notified() {
    let f = facts(
        RunState::Succeeded,
        &[
            ("io.write_bw_mib_s.vs_median", "NO_REFERENCE"),
            ("io.read_bw_mib_s.vs_median", "INCONCLUSIVE"),
            ("io.verify_errors", "PASS"),
        ],
        &[("n1", "node.cores", "NO_REFERENCE")],
    );
    assert_eq!(f.verdict(), Some("INCONCLUSIVE"));
    assert_eq!(f.event(), None);
    let f = facts(
        RunState::Succeeded,
        &[("io.write", "FAIL"), ("io.read", "INCONCLUSIVE")],
        &[("n1", "node.cores", "INCONCLUSIVE")],
    );
    assert_eq!(f.event(), Some("verdict.fail"));
    assert_eq!(f.failing_checks().len(), 1);
}

#[test]
fn smtp_urls_and_addresses_are_checked() {
    assert_eq!(
        parse_smtp_url("smtp://127.0.0.1:2525").unwrap(),
        (SmtpSecurity::Plain, "127.0.0.1".into(), 2525)
    );
    assert_eq!(
        parse_smtp_url("smtp+starttls://mail.example.org").unwrap(),
        (SmtpSecurity::StartTls, "mail.example.org".into(), 587)
    );
    assert_eq!(
        parse_smtp_url("smtps://[::1]").unwrap(),
        (SmtpSecurity::Tls, "::1".into(), 465)
    );
    for bad in [
        "http://h/",
        "smtp://u:p@h",
        "smtp://h/x",
        "smtp://h?tls=none",
        "nothing",
    ] {
        let e = parse_smtp_url(bad).unwrap_err();
        assert!(e.starts_with("smtp-url: "), "{e}");
    }
    assert!(check_address("e", "ops@example.org").is_ok());
    let e = check_address("email ops", "ops at example").unwrap_err();
    assert!(
        e.contains("email ops") && e.contains("ops at example"),
        "{e}"
    );
    let s = SmtpConfig {
        security: SmtpSecurity::StartTls,
        host: "h".into(),
        port: 587,
        from: "b@example.org".into(),
        user: Some("u".into()),
        password: Some("hunter2-secret".into()),
        ca_file: None,
    };
    assert!(!format!("{s:?}").contains("hunter2"));
    // Email notifiers need an SMTP server and valid recipients.
    let mut cfg = NotifyConfig {
        emails: vec![EmailNotifier {
            name: "mail".into(),
            to: vec!["ops@example.org".into()],
        }],
        ..Default::default()
    };
    assert!(cfg.check().unwrap_err().contains("--smtp-url"));
    cfg.smtp = Some(SmtpConfig {
        security: SmtpSecurity::Plain,
        ..s.clone()
    });
    assert!(cfg.check().unwrap_err().contains("in clear"));
    cfg.smtp = Some(s);
    assert!(cfg.check().is_ok());
    assert!(cfg.has("mail") && cfg.enabled());
    cfg.emails[0].to.push("nope".into());
    assert!(cfg.check().unwrap_err().contains("'nope'"));
}

#[test]
fn an_email_says_what_failed() {
    let f = facts(
        RunState::Succeeded,
        &[("io.write_bw_mib_s", "FAIL"), ("io.read", "PASS")],
        &[],
    );
    let body = payload(
        &f,
        "verdict.fail",
        "01DEL",
        "mail",
        Some("http://d:1"),
        1_700_000_000_000,
    );
    let (subject, text) = email_text(&body);
    assert_eq!(subject, "[benchlake] FAIL: pio run 01RUN");
    assert!(
        text.starts_with("Run 01RUN of pio ended SUCCEEDED with the verdict FAIL.\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  FAIL  io.write_bw_mib_s = 1.5 MiB/s (reference 100 MiB/s): io.write_bw_mib_s FAIL\n"
        ),
        "{text}"
    );
    assert!(!text.contains("io.read ="), "{text}");
    assert!(
        text.contains("Failing nodes:\n  a1: io.write_bw_mib_s\n  a2: io.write_bw_mib_s\n"),
        "{text}"
    );
    assert!(
        text.contains("Dashboard: http://d:1/runs/01RUN\n"),
        "{text}"
    );
    assert!(text.contains(&body), "the JSON rides along");
    let f = facts(RunState::Failed, &[], &[]);
    let (subject, _) = email_text(&payload(&f, "run.failed", "01DEL", "mail", None, 0));
    assert_eq!(subject, "[benchlake] FAILED: pio run 01RUN");
}
