//! The engine's rules, checked against Placement's documented outcomes.

use super::*;

fn creds(roles: &[&str], project: Option<&str>, system: bool) -> Credentials {
    Credentials {
        user_id: "u1".into(),
        project_id: project.map(str::to_string),
        domain_id: None,
        roles: roles.iter().map(|r| r.to_string()).collect(),
        system_scope: system.then(|| "all".to_string()),
    }
}

fn own_target(c: &Credentials) -> Target {
    let mut t = Target::new();
    if let Some(p) = &c.project_id {
        t.insert("project_id", p.clone());
    }
    t.insert("user_id", c.user_id.clone());
    t
}

fn usages_target(project: &str) -> Target {
    Target::from([("project_id", project.to_string())])
}

const LEGACY: Mode = Mode {
    enforce_new_defaults: false,
    enforce_scope: true,
};
const SECURE: Mode = Mode {
    enforce_new_defaults: true,
    enforce_scope: true,
};

fn policy(mode: Mode, file: Option<&str>) -> Result<Policy, PolicyError> {
    Policy::build(mode, file.map(|f| ("policy.yaml", f)))
}

fn allowed(p: &Policy, rule: &str, c: &Credentials, t: &Target) -> bool {
    p.enforce(rule, c, t) == Decision::Allowed
}

#[test]
fn legacy_mode_admits_admin_and_service_only() {
    let p = policy(LEGACY, None).expect("defaults build");
    let admin = creds(&["admin"], Some("p1"), false);
    let service = creds(&["service"], Some("p2"), false);
    let member = creds(&["member", "reader"], Some("p1"), false);
    for rule in [
        "placement:resource_providers:create",
        "placement:allocations:update",
        "placement:deployments:create",
    ] {
        assert!(allowed(&p, rule, &admin, &own_target(&admin)), "{rule}");
        assert!(allowed(&p, rule, &service, &own_target(&service)), "{rule}");
        assert!(!allowed(&p, rule, &member, &own_target(&member)), "{rule}");
    }
    // The legacy reshaper rule is `role:service or role:admin`.
    assert!(allowed(
        &p,
        "placement:reshaper:reshape",
        &admin,
        &own_target(&admin)
    ));
}

#[test]
fn secure_defaults_narrow_the_service_rules() {
    let p = policy(SECURE, None).expect("defaults build");
    let admin = creds(&["admin"], Some("p1"), false);
    let service = creds(&["service"], Some("p2"), false);
    assert!(!allowed(
        &p,
        "placement:reshaper:reshape",
        &admin,
        &own_target(&admin)
    ));
    assert!(allowed(
        &p,
        "placement:reshaper:reshape",
        &service,
        &own_target(&service)
    ));
    assert!(allowed(
        &p,
        "placement:resource_providers:list",
        &service,
        &own_target(&service)
    ));
}

#[test]
fn a_reader_sees_usages_of_its_own_project_only() {
    for mode in [LEGACY, SECURE] {
        let p = policy(mode, None).expect("defaults build");
        let reader = creds(&["reader"], Some("p1"), false);
        let usages = |project| allowed(&p, "placement:usages", &reader, &usages_target(project));
        // The legacy mode still admits `new or deprecated`.
        assert!(usages("p1"), "{mode:?}");
        assert!(!usages("p2"), "{mode:?}");
        assert!(
            !allowed(&p, "placement:usages", &reader, &Target::new()),
            "no project: no match"
        );
    }
}

#[test]
fn system_scope_is_refused_where_only_projects_are_admitted() {
    let p = policy(LEGACY, None).expect("defaults build");
    let system_admin = creds(&["admin"], None, true);
    assert_eq!(
        p.enforce(
            "placement:resource_providers:list",
            &system_admin,
            &Target::new()
        ),
        Decision::OutOfScope
    );
    let unscoped = Mode {
        enforce_scope: false,
        ..LEGACY
    };
    let p = policy(unscoped, None).expect("defaults build");
    assert!(allowed(
        &p,
        "placement:resource_providers:list",
        &system_admin,
        &Target::new()
    ));
}

#[test]
fn a_policy_file_overrides_rules_and_they_compose() {
    let file = "\"admin_or_service_api\": \"role:operator or rule:admin_api\"\nplacement:usages: \"user_id:%(user_id)s and not role:banned\"\n";
    let p = policy(SECURE, Some(file)).expect("file builds");
    let operator = creds(&["operator"], Some("p1"), false);
    assert!(allowed(
        &p,
        "placement:traits:list",
        &operator,
        &own_target(&operator)
    ));
    assert!(allowed(
        &p,
        "placement:deployments:create",
        &operator,
        &own_target(&operator)
    ));
    let admin = creds(&["admin"], Some("p1"), false);
    assert!(allowed(
        &p,
        "placement:traits:list",
        &admin,
        &own_target(&admin)
    ));
    let member = creds(&["member"], Some("p1"), false);
    assert!(!allowed(
        &p,
        "placement:traits:list",
        &member,
        &own_target(&member)
    ));
    let t = Target::from([("user_id", "u1".to_string())]);
    assert!(allowed(&p, "placement:usages", &member, &t));
    let banned = creds(&["member", "banned"], Some("p1"), false);
    assert!(!allowed(&p, "placement:usages", &banned, &t));
}

#[test]
fn open_policy_admits_anyone_but_keeps_admin_api() {
    let file = "admin_or_service_api: \"@\"\nplacement:reshaper:reshape: \"@\"\n";
    let p = policy(LEGACY, Some(file)).expect("file builds");
    let nobody = creds(&[], Some("p9"), false);
    assert!(allowed(
        &p,
        "placement:resource_providers:create",
        &nobody,
        &own_target(&nobody)
    ));
    assert!(allowed(
        &p,
        "placement:reshaper:reshape",
        &nobody,
        &own_target(&nobody)
    ));
    assert!(!allowed(&p, "admin_api", &nobody, &own_target(&nobody)));
}

#[test]
fn bad_policy_files_are_refused_with_their_line() {
    for (file, says) in [
        ("admin_api: \"role:admin or\"\n", "line 1: admin_api:"),
        (
            "admin_api: rule:service_api\nservice_api: rule:admin_api\n",
            "cycle",
        ),
        (
            "admin_api: rule:admin_api\n",
            "cycle: admin_api -> admin_api",
        ),
        ("admin_api role:admin\n", "line 1"),
    ] {
        let e = policy(LEGACY, Some(file)).expect_err(file).to_string();
        assert!(e.contains(says), "{file:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

/// Issue 64, defect 8: hostile files are refused quickly with a line that
/// says why, never a crash or a minute's work.
#[test]
fn hostile_policy_files_are_refused_quickly() {
    let nots = format!("admin_api: \"{}role:admin\"\n", "not ".repeat(50_000));
    let e = policy(LEGACY, Some(&nots)).unwrap_err().to_string();
    assert!(
        e.contains("line 1: admin_api:") && e.contains("nest more than"),
        "{e}"
    );
    // A chain of 5,000 `rule:` references: refused, naming the line of
    // the first rule whose chain is too long.
    let mut chain = String::from("admin_api: rule:r0\n");
    for i in 0..5_000 {
        chain.push_str(&format!("r{i}: rule:r{}\n", i + 1));
    }
    chain.push_str("r5000: role:admin\n");
    let e = policy(LEGACY, Some(&chain)).unwrap_err().to_string();
    assert!(
        e.contains(": line ") && e.contains("more than 64 deep"),
        "{e}"
    );
    // A chain enforcement follows whole is fine.
    let mut short = String::from("admin_api: rule:r0\n");
    for i in 0..63 {
        short.push_str(&format!("r{i}: rule:r{}\n", i + 1));
    }
    short.push_str("r63: role:admin\n");
    let p = policy(LEGACY, Some(&short)).expect("64 references");
    let admin = creds(&["admin"], Some("p1"), false);
    assert!(allowed(&p, "admin_api", &admin, &own_target(&admin)));
    // A long cycle is one line too.
    let mut cycle = String::new();
    for i in 0..5_000 {
        cycle.push_str(&format!("r{i}: rule:r{}\n", (i + 1) % 5_000));
    }
    let e = policy(LEGACY, Some(&cycle)).unwrap_err().to_string();
    assert!(e.contains("cycle") && !e.contains('\n'), "{e}");
    assert!(e.len() < 400, "{e}");
    let huge = format!("# {}\n", "x".repeat(2 << 20));
    assert!(policy(LEGACY, Some(&huge))
        .unwrap_err()
        .to_string()
        .contains("over the limit"));
}

/// What oslo.policy accepts and warns about: a rule no route checks is
/// kept (others may name it), a `rule:` naming no rule denies, or means
/// the file's `default` rule when there is one.
#[test]
fn unknown_and_undefined_rules_are_warned_about_as_oslo_policy_does() {
    let p = policy(
        SECURE,
        Some("placement:nope: \"@\"\nplacement:usages: rule:no_such or rule:helper\nhelper: role:operator\n"),
    )
    .expect("builds");
    assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    assert!(
        p.warnings[0].contains("line 1: \"placement:nope\" is no rule"),
        "{:?}",
        p.warnings
    );
    assert!(
        p.warnings[1].contains(
            "line 2: placement:usages refers to rule \"no_such\", which is not defined: it denies"
        ),
        "{:?}",
        p.warnings
    );
    let t = Target::from([("project_id", "p1".to_string())]);
    let operator = creds(&["operator"], Some("p1"), false);
    let reader = creds(&["reader"], Some("p1"), false);
    assert_eq!(
        p.enforce("placement:usages", &operator, &t),
        Decision::Allowed
    );
    assert_eq!(p.enforce("placement:usages", &reader, &t), Decision::Denied);
    let p = policy(
        SECURE,
        Some("default: role:reader\nplacement:usages: rule:no_such\n"),
    )
    .expect("builds");
    assert!(
        p.warnings[0].contains("the default rule applies there"),
        "{:?}",
        p.warnings
    );
    assert_eq!(
        p.enforce("placement:usages", &reader, &t),
        Decision::Allowed
    );
    assert_eq!(
        p.enforce("placement:usages", &operator, &t),
        Decision::Denied
    );
    // A default that names an undefined rule ends, denied.
    let p = policy(
        SECURE,
        Some("default: rule:no_such\nplacement:usages: rule:other\n"),
    )
    .expect("builds");
    assert_eq!(p.enforce("placement:usages", &reader, &t), Decision::Denied);
}

#[test]
fn every_default_parses_in_both_modes() {
    for mode in [LEGACY, SECURE] {
        let p = policy(mode, None).expect("defaults build");
        assert_eq!(
            p.rules.len(),
            defaults::PLACEMENT_RULES.len() + defaults::EXTENSION_RULES.len()
        );
    }
}

#[test]
fn generic_checks_interpolate_and_compare() {
    let c = creds(&["Reader"], Some("p1"), false);
    let t = Target::from([("project_id", "p1".to_string())]);
    assert!(generic("project_id", "%(project_id)s", &c, &t));
    assert!(!generic("project_id", "%(missing)s", &c, &t));
    assert!(generic("'p1'", "%(project_id)s", &c, &t));
    assert!(!generic("system_scope", "all", &c, &t));
    assert!(generic("system_scope", "all", &creds(&[], None, true), &t));
    assert_eq!(interpolate("a%(project_id)sb", &t).as_deref(), Some("ap1b"));
    assert_eq!(interpolate("%(project_id", &t), None);
}
