//! Contract tests of the normalizer (the golden vectors are replayed in tests/vectors.rs).

use super::*;

fn norm(code: &str, language: &str) -> Normalized {
    normalize(code, language).expect("normalize")
}

fn same(a: &str, b: &str, language: &str) {
    let (x, y) = (norm(a, language), norm(b, language));
    assert!(x.parse_ok, "{a}: {}", x.fallback_reason);
    assert!(y.parse_ok, "{b}: {}", y.fallback_reason);
    assert_eq!(x.code_hash, y.code_hash, "expected same hash:\n{a}\n{b}");
}

fn different(a: &str, b: &str, language: &str) {
    let (x, y) = (norm(a, language), norm(b, language));
    assert_ne!(
        x.code_hash, y.code_hash,
        "expected different hash:\n{a}\n{b}"
    );
}

#[test]
fn seed_example() {
    let a = norm(r#"const x = await mcp.read_file({path: "a.json"})"#, "js");
    let b = norm(r#"const x = await mcp.read_file({path: "b.json"})"#, "js");
    assert!(a.parse_ok);
    assert_eq!(a.code_hash, b.code_hash);
    assert_eq!(a.template, "const x = await mcp.read_file({path: $PATH})");
    assert_eq!(a.params.len(), 1);
    assert_eq!(a.params[0].name, "$PATH");
    assert_eq!(a.params[0].value_json, "\"a.json\"");
    assert_eq!(a.params[0].json_type, JsonType::String);
    assert_eq!((a.params[0].start, a.params[0].end), (37, 45));
    assert_eq!(a.tool_calls, vec!["read_file"]);
    assert!(a.code_hash.starts_with("sha256:") && a.code_hash.len() == 71);
}

#[test]
fn same_hash_cases_js() {
    let js = "js";
    same("f(\"a\")", "f('b')", js);
    same("f(1)", "f(2.5)", js);
    same(
        "const a = 1;\nuse(a)",
        "const   a=2 // note\n\n;use( a )",
        js,
    );
    same(
        "const data = await mcp.x(); use(data)",
        "const x = await mcp.x(); use(x)",
        js,
    );
    same(
        "await mcp.write({path: 'a', mode: 'w'})",
        "await mcp.write({mode: 'x', path: 'b',})",
        js,
    );
    same("/* c */ mcp.a()", "mcp.a()", js);
    same("a = 1;\nb(a);", "a = 1\nb(a)", js);
    different("for (;;) {}", "for (;a;) {}", js);
    same(
        "function f(a, b) { return a + b }",
        "function g(x, y) { return x + y }",
        js,
    );
}

#[test]
fn different_hash_cases_js() {
    let js = "js";
    different(
        "mcp.read_file({path: 'a'})",
        "mcp.write_file({path: 'a'})",
        js,
    );
    different(
        "mcp.read_file({path: 'a'})",
        "mcp.read_file({file: 'a'})",
        js,
    );
    different("mcp.a(); mcp.b()", "mcp.b(); mcp.a()", js);
    different("mcp.a()", "mcp.a(); mcp.a()", js);
    different("if (x) { f(1) }", "while (x) { f(1) }", js);
    different("f(a + 1)", "f(a - 1)", js);
    different("f(1)", "f(limit)", js);
    different("f(true)", "f(false)", js);
    different("f(true)", "f(null)", js);
    different("f(1)", "f('1')", js);
    different("const a = 1; use(a, b)", "const a = 1; use(b, a)", js);
    different("use(console)", "use(window)", js);
    assert_ne!(
        norm("x = 1", "js").code_hash,
        norm("x = 1", "python").code_hash
    );
    different(
        "mcp.call('read_file', {})",
        "mcp.call('write_file', {})",
        js,
    );
}

#[test]
fn python_rules() {
    let py = "python";
    same(
        "await tools.read_file(path='a')",
        "await tools.read_file(path=\"b\")",
        py,
    );
    same(
        "tools.w(path='a', mode='w')",
        "tools.w(mode='x', path='b')",
        py,
    );
    same(
        "data = tools.get()\nprint(data)",
        "rows = tools.get()\nprint(rows)",
        py,
    );
    same("x = 1  # comment\n", "x = 2\n\n", py);
    different("if a:\n    f()\ng()\n", "if a:\n    f()\n    g()\n", py);
    different("tools.w(path='a')", "tools.w(file='a')", py);
    different("f(True)", "f(None)", py);
    different("f(1)", "f(-1) if x else 0", py);
    let n = norm(
        "res = await tools.read_file(path=\"a.txt\")\nlimit = 5\n",
        py,
    );
    assert_eq!(
        n.template,
        "res = await tools.read_file(path=$PATH)\nlimit = $LIMIT\n"
    );
    assert_eq!(n.tool_calls, vec!["read_file"]);
}

#[test]
fn placeholder_names() {
    let n = norm(
        "const limit = 5; const maxResults = -2; mcp.read_file('a', 'b'); f({path: 'x'}, {path: 'y'}); g(`t`, 1.5)",
        "ts",
    );
    let names: Vec<&str> = n.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "$LIMIT",
            "$MAX_RESULTS",
            "$READ_FILE_ARG0",
            "$READ_FILE_ARG1",
            "$PATH",
            "$PATH_2",
            "$G_ARG0",
            "$G_ARG1"
        ]
    );
    assert_eq!(n.params[1].value_json, "-2");
    assert_eq!(n.params[7].json_type, JsonType::Number);
    let listed = norm("print([1, 'a'])", "py");
    assert_eq!(listed.params[1].name, "$PRINT_ARG0_2");
    let bare = norm("return_value = x or 'zz'", "py");
    assert_eq!(bare.params[0].name, "$STR");
}

#[test]
fn tool_calls_in_source_order() {
    let n = norm(
        "const a = await mcp.read_file({path: 'a'});\nawait mcp.call('parse_json', a);\nawait mcp.gmail.send({to: 'x@y.z'});\nother.call('no');",
        "js",
    );
    assert_eq!(n.tool_calls, vec!["read_file", "parse_json", "gmail:send"]);
    // The tool name given as a string is code, not a parameter.
    assert!(n.params.iter().all(|p| p.value_json != "\"parse_json\""));
    let py = norm("x = await tools.call_tool('memory:search', q='a')\n", "py");
    assert_eq!(py.tool_calls, vec!["memory:search"]);
}

#[test]
fn a_tool_named_by_a_url_keeps_no_password() {
    // The template and the redacted code drop the password; the tool names read from the code
    // kept it, and capture stores them (`code_tools`).
    let shapes = [
        (
            "await mcp[\"https://admin:Tr0ubPW77x@tools.internal/q\"]({q: 1})",
            "js",
        ),
        (
            "await session.call_tool(\"pg://admin:Tr0ubPW77x@db/q\", {\"q\": 1})\n",
            "py",
        ),
        (
            "await mcp[\"https://admin:Tr0ubPW77x@tools.internal/q\"]({q: 1}) (((",
            "js",
        ),
    ];
    for (code, language) in shapes {
        let n = norm(code, language);
        assert_eq!(n.tool_calls.len(), 1, "{code}");
        assert!(
            n.tool_calls[0].contains("[REDACTED]@"),
            "{:?}",
            n.tool_calls
        );
        for text in n.tool_calls.iter().chain(n.steps.iter().map(|s| &s.tool)) {
            assert!(!text.contains("Tr0ubPW77x"), "{code}: {text}");
        }
    }
}

#[test]
fn secrets_flagged() {
    let n = norm(
        "mcp.http({url: 'https://a.io', apiKey: 'abc', auth: 'ghp_0123456789abcdefghijklmnopqrstuvwxyz', note: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl'})",
        "js",
    );
    let flags: Vec<(&str, bool)> = n
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.secret))
        .collect();
    assert_eq!(
        flags,
        [
            ("$URL", false),
            ("$API_KEY", true),
            ("$AUTH", true),
            ("$NOTE", true)
        ]
    );
    let schema: serde_json::Value = serde_json::from_str(&n.schema_json).unwrap();
    assert_eq!(schema["properties"]["$URL"]["format"], "uri");
    assert_eq!(schema["properties"]["$API_KEY"]["writeOnly"], true);
}

#[test]
fn an_unclosed_bracket_in_a_value_the_fallback_reads_is_no_panic() {
    // an unclosed `[` has no closing bracket (usize::MAX in `closing_brackets`): the list
    // test added 3 to it (found by tests/fuzz_normalize.rs in a debug build)
    for code in [
        " a\u{10d8e}={[",
        "``{a=\"\"\"a{_\n___________`[",
        "password = [",
        "pw = [\"x\"",
    ] {
        for lang in ["python", "js", "ts", "bash"] {
            let normalized = norm(code, lang);
            assert!(!normalized.code_hash.is_empty(), "{code:?} {lang}");
        }
    }
}

#[test]
fn fallback_paths() {
    let broken = norm("const x = await mcp.read_file({path: 'a'", "js");
    assert!(!broken.parse_ok);
    assert!(
        broken.fallback_reason.contains("line 1"),
        "{}",
        broken.fallback_reason
    );
    assert_eq!(broken.params[0].name, "$PATH");
    assert_eq!(broken.tool_calls, vec!["read_file"]);
    let other = norm("fn main() { let path = \"a\"; }", "Rust");
    assert_eq!(other.language, "rust");
    assert!(!other.parse_ok);
    assert_eq!(other.template, "fn main() { let path = $PATH; }");
    assert_eq!(
        other.code_hash,
        norm("fn main() {\n  let path = 'b';  // x\n}", "rust").code_hash
    );
    let deep = "(".repeat(100_000);
    let n = norm(&deep, "js");
    assert!(
        !n.parse_ok && n.fallback_reason.contains("nested"),
        "{}",
        n.fallback_reason
    );
    let chain = format!("x = {}1\n", "1 + ".repeat(50_000));
    let n = norm(&chain, "python");
    assert!(
        !n.parse_ok && n.fallback_reason.contains("deeper"),
        "{}",
        n.fallback_reason
    );
}

/// A literal's place in the value it is joined into is read once a level, not once a
/// literal a level: `1 + 1 + ...` just under the depth cap, and a chain of strings, cost work
/// in proportion to their size (docs/normalization.md, Limits and robustness). Counts of
/// work, not time: the same on any machine.
#[test]
fn joined_chains_cost_work_in_proportion_to_their_size() {
    use super::tree::{JOINED_BY_CALLS, JOINED_NODES_VISITED};
    let numbers = format!("x = 1{}\n", " + 1".repeat(1000));
    let strings = format!("x = \"a\"{}\n", " + \"a\"".repeat(900));
    let joined = format!("x = \"\".join([{}])\n", "\"a\", ".repeat(2000));
    for language in ["python", "js"] {
        for code in [&numbers, &strings, &joined] {
            JOINED_BY_CALLS.with(|c| c.set(0));
            JOINED_NODES_VISITED.with(|c| c.set(0));
            let n = norm(code, language);
            assert!(n.parse_ok, "{language}: {}", n.fallback_reason);
            let calls = JOINED_BY_CALLS.with(|c| c.get());
            let visited = JOINED_NODES_VISITED.with(|c| c.get());
            assert!(
                calls <= code.len() && visited <= code.len(),
                "{language} {}...: {calls} joined_by calls, {visited} nodes visited for {} bytes",
                &code[..12],
                code.len()
            );
        }
    }
}

#[test]
fn too_large_is_an_error() {
    let big = "a".repeat(MAX_INPUT_BYTES + 1);
    assert!(matches!(
        normalize(&big, "js"),
        Err(CoreError::TooLarge { .. })
    ));
    assert!(matches!(
        parse_only(&big, "js"),
        Err(CoreError::TooLarge { .. })
    ));
}

#[test]
fn offsets_are_code_points() {
    let code = "const é = 'ü'; f('x')";
    let n = norm(code, "js");
    let chars: Vec<char> = code.chars().collect();
    for p in &n.params {
        let literal: String = chars[p.start..p.end].iter().collect();
        assert!(
            literal.starts_with('\'') && literal.ends_with('\''),
            "{literal}"
        );
    }
}

/// A bounded, deterministic fuzz pass: random edits of the golden inputs, in every language.
/// The tree path catches its own panics and falls back, so a caught panic is checked for
/// explicitly through its reason; the template must always give the input back.
#[test]
fn fuzzed_edits_never_panic_and_round_trip() {
    let vectors: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/normalization.json"
    )))
    .unwrap();
    let seeds: Vec<String> = vectors["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["code"].as_str().unwrap().to_owned())
        .collect();
    const ALPHABET: &[char] = &[
        '(', ')', '{', '}', '[', ']', '\'', '"', '`', '\\', ':', ';', ',', '.', '=', '-', '#', '/',
        '*', '\n', ' ', '\t', '$', '0', '9', 'x', 'é', '🍮', '\u{0}', '\u{2028}',
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: usize| {
        // xorshift64*: deterministic, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % bound.max(1)
    };
    let mut redacted_templates = 0usize;
    for round in 0..600 {
        let mut chars: Vec<char> = seeds[round % seeds.len()].chars().collect();
        for _ in 0..1 + next(6) {
            let at = next(chars.len() + 1);
            match next(3) {
                0 => chars.insert(at, ALPHABET[next(ALPHABET.len())]),
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ if at < chars.len() => chars[at] = ALPHABET[next(ALPHABET.len())],
                _ => {}
            }
        }
        let code: String = chars.into_iter().collect();
        for language in ["js", "ts", "tsx", "py", "other"] {
            let n = normalize(&code, language).expect("small input");
            assert!(
                !n.fallback_reason.contains("internal error"),
                "{language}: {code:?}"
            );
            if n.template.contains(secrets::REDACTED_TOKEN) {
                // credential-shaped text outside the parameters (broken quotes make a key
                // code) is redacted in the template: it cannot give the input back
                redacted_templates += 1;
                continue;
            }
            let mut rebuilt = String::new();
            let mut rest = n.template.as_str();
            let code_chars: Vec<char> = code.chars().collect();
            for p in &n.params {
                let Some(at) = rest.find(&p.name) else {
                    panic!("{language}: {code:?} -> {:?}", n.template)
                };
                rebuilt.push_str(&rest[..at]);
                rebuilt.extend(&code_chars[p.start..p.end]);
                rest = &rest[at + p.name.len()..];
            }
            rebuilt.push_str(rest);
            assert_eq!(rebuilt, code, "{language}");
        }
    }
    assert!(
        redacted_templates < 300,
        "{redacted_templates} of 3000 templates redacted"
    );
}

#[test]
fn literals_past_the_parameter_cap_stay_code() {
    let many = |v: &str| format!("x = [{}]", vec![v; MAX_PARAMS + 1000].join(", "));
    let (a, b) = (norm(&many("1"), "python"), norm(&many("2"), "python"));
    assert!(a.parse_ok, "{}", a.fallback_reason);
    assert_eq!(a.params.len(), MAX_PARAMS);
    // the literals past the cap are written as they are, so the template is the code's size
    assert!(
        a.template.len() < many("1").len() + MAX_PARAMS * 8,
        "{}",
        a.template.len()
    );
    assert!(a.template.ends_with("1, 1]"));
    // hashed by value past the cap: other values there are other code
    assert_ne!(a.code_hash, b.code_hash);
    let mut first = vec!["7"; MAX_PARAMS];
    first.extend(vec!["1"; 1000]);
    let c = norm(&format!("x = [{}]", first.join(", ")), "python");
    assert_eq!(
        a.code_hash, c.code_hash,
        "values under the cap are parameters"
    );
    let js = norm(&format!("f([{}])", vec!["'s'"; 2000].join(",")), "js");
    assert_eq!(js.params.len(), MAX_PARAMS);
    let fallback = norm(&vec!["1"; 2000].join(" "), "rust");
    assert_eq!(fallback.params.len(), MAX_PARAMS);
}

#[test]
fn placeholder_names_are_bounded() {
    let key = "k".repeat(5000);
    let n = norm(&format!("f({{{key}: 1}})"), "js");
    assert_eq!(n.params[0].name.len(), 1 + MAX_PARAM_NAME_BYTES);
}

#[test]
fn secrets_are_redacted_in_the_code_and_past_the_cap() {
    let key = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e";
    let code = format!(
        "// fallback key {key}\nconst k = '{key}'\nconst xs = [{}, '{key}']\nawait mcp.call_api({{apiKey: k}})",
        vec!["1"; MAX_PARAMS].join(", ")
    );
    let n = norm(&code, "js");
    assert!(n.parse_ok, "{}", n.fallback_reason);
    assert!(n.params[0].secret);
    assert_eq!(n.params.len(), MAX_PARAMS);
    for (what, text) in [("template", &n.template), ("redacted", &n.redacted_code)] {
        assert!(!text.contains(key), "{what}: {text}");
    }
    assert!(n.redacted_code.contains("const k = \"[REDACTED]\""));
    assert!(n.redacted_code.contains("// fallback key [REDACTED]"));
    let plain = norm("await mcp.read_file({path: 'a.json'})", "js");
    assert_eq!(plain.redacted_code, "await mcp.read_file({path: 'a.json'})");
}

#[test]
fn a_password_a_command_or_a_login_call_takes_by_position_is_a_secret() {
    for (code, language) in [
        (
            "aws configure set aws_secret_access_key hunter2pass",
            "bash",
        ),
        ("npm config set _authToken hunter2pass", "bash"),
        ("gh auth login --with-token <<< hunter2pass", "bash"),
        ("htpasswd -b /etc/h bob hunter2pass", "bash"),
        ("htpasswd -nb bob hunter2pass", "bash"),
        (
            "openssl enc -aes-256-cbc -k hunter2pass -in a -out b",
            "bash",
        ),
        (
            "openssl genrsa -aes256 -passout pass:hunter2pass 2048",
            "bash",
        ),
        (
            "import smtplib\ns = smtplib.SMTP(h)\ns.login(\"bob@x.com\", \"hunter2pass\")",
            "python",
        ),
        (
            "import ftplib\nftplib.FTP(h).login(user, \"hunter2pass\")",
            "python",
        ),
        ("ftp = ftplib.FTP(h, \"bob\", \"hunter2pass\")", "python"),
        (
            "m = imaplib.IMAP4_SSL(h)\nm.login(\"bob\", \"hunter2pass\")",
            "python",
        ),
        ("await client.login(\"bob\", \"hunter2pass\");", "js"),
    ] {
        let n = norm(code, language);
        assert!(
            !n.redacted_code.contains("hunter2pass"),
            "{code}: {}",
            n.redacted_code
        );
        assert!(!n.template.contains("hunter2pass"), "{code}");
    }
    // the user stays, and so do a command's other words
    let n = norm("htpasswd -b /etc/h bob hunter2pass", "bash");
    assert!(
        n.redacted_code.contains("/etc/h bob"),
        "{}",
        n.redacted_code
    );
    for kept in [
        "aws configure set region eu-west-1",
        "openssl enc -aes-256-cbc -kfile /etc/k -in a",
        "htpasswd -D /etc/h bob",
    ] {
        assert_eq!(norm(kept, "bash").redacted_code, kept);
    }
}

#[test]
fn a_jdbc_password_given_by_position_or_in_a_credentials_pair_is_redacted() {
    for (code, language) in [
        (
            "conn = jaydebeapi.connect(\"org.h2.Driver\", \"jdbc:h2:tcp://localhost/~/test\", [\"bob\", \"hunter2pass\"])",
            "python",
        ),
        (
            "conn = jaydebeapi.connect(d, url, (\"bob\", \"hunter2pass\"), \"/opt/h2.jar\")",
            "python",
        ),
        ("conn = jaydebeapi.connect(d, url, [user, \"hunter2pass\"])", "python"),
        (
            "conn = connect(\"org.h2.Driver\", \"jdbc:h2:mem:x\", [\"bob\", \"hunter2pass\"])",
            "python",
        ),
        (
            "c = jaydebeapi.connect(jclassname=d, url=u, driver_args=[\"bob\", \"hunter2pass\"])",
            "python",
        ),
        (
            "const c = DriverManager.getConnection(\"jdbc:h2:mem:x\", \"bob\", \"hunter2pass\");",
            "js",
        ),
        (
            "dm.getConnection(url, \"bob\", \"hunter2pass\", (err, c) => use(c));",
            "js",
        ),
    ] {
        let n = norm(code, language);
        assert!(
            !n.redacted_code.contains("hunter2pass"),
            "{code}: {}",
            n.redacted_code
        );
        assert!(!n.template.contains("hunter2pass"), "{code}");
        assert!(n.params.iter().any(|p| p.secret), "{code}");
    }
    // the user stays; a pair given elsewhere, or to another call, is no credential
    let n = norm(
        "conn = jaydebeapi.connect(d, url, [\"bob\", \"hunter2pass\"])",
        "python",
    );
    assert!(n.redacted_code.contains("\"bob\""), "{}", n.redacted_code);
    for kept in [
        "x = mcp.f(\"a\", \"b\", [\"a\", \"b\"])",
        "db = sqlite3.connect(\"a.db\", 5, [\"a\", \"b\"])",
        "sock.connect((\"example.com\", 80))",
        "c = jaydebeapi.connect(d, url, [\"bob\", \"pw\", \"x\"])",
        "pool.getConnection(\"a\", \"b\")",
    ] {
        let n = norm(kept, "python");
        assert!(!n.params.iter().any(|p| p.secret), "{kept}");
        assert!(!n.redacted_code.contains("[REDACTED]"), "{kept}");
    }
}

#[test]
fn a_jdbc_pair_given_to_jaydebeapis_connect_under_another_name_is_redacted() {
    // jaydebeapi imported under an alias, or its `connect` imported alone, with the URL in a
    // variable: the password was kept (docs/normalization.md, Secrets)
    for code in [
        "import jaydebeapi as jdb\nconn = jdb.connect(d, url, [\"bob\", \"hunter2pass\"])",
        "from jaydebeapi import connect\nconn = connect(d, url, [\"bob\", \"hunter2pass\"])",
    ] {
        let n = norm(code, "python");
        assert!(
            !n.redacted_code.contains("hunter2pass"),
            "{code}: {}",
            n.redacted_code
        );
        assert!(n.redacted_code.contains("\"bob\""), "{}", n.redacted_code);
        assert!(n.params.iter().any(|p| p.secret), "{code}");
    }
}

#[test]
fn a_jdbc_pair_assigned_to_a_variable_then_given_as_driver_args_is_redacted() {
    // `creds = ["bob", "..."]` then `connect(d, url, creds)`: the password was kept, the
    // redaction not following the variable (docs/normalization.md, Secrets)
    for code in [
        "creds = [\"bob\", \"hunter2pass\"]\nconn = jaydebeapi.connect(d, url, creds)",
        "creds = (\"bob\", \"hunter2pass\")\nconn = jaydebeapi.connect(d, url, driver_args=creds)",
        "import jaydebeapi as jdb\ncreds = [\"bob\", \"hunter2pass\"]\nc = jdb.connect(d, url, creds)",
        "creds = [user, \"hunter2pass\"]\nc = connect(\"org.h2.Driver\", \"jdbc:h2:mem:x\", creds)",
        "creds = [\"x\", \"y\"]\ncreds = [\"bob\", \"hunter2pass\"]\nc = jaydebeapi.connect(d, u, creds)",
    ] {
        let n = norm(code, "python");
        assert!(n.parse_ok, "{code}");
        assert!(!stored_holds(&n, "hunter2pass"), "{code}: {n:?}");
        assert!(n.redacted_code.contains("[REDACTED]"), "{}", n.redacted_code);
        assert!(
            n.redacted_code.contains("\"bob\"") || n.redacted_code.contains("[user,"),
            "the user stays: {}",
            n.redacted_code
        );
    }
    // a list of another length, or given to another call, keeps its items
    for kept in [
        "creds = [\"bob\", \"pw\", \"x\"]\nc = jaydebeapi.connect(d, url, creds)",
        "pair = [\"a\", \"b\"]\ndb = sqlite3.connect(\"a.db\", 5, pair)",
        "pair = [\"a\", \"b\"]\nc = jaydebeapi.connect(d, pair, x)",
        "addr = (\"example.com\", 80)\nsock.connect(addr)",
    ] {
        let n = norm(kept, "python");
        assert!(!n.params.iter().any(|p| p.secret), "{kept}");
        assert!(!n.redacted_code.contains("[REDACTED]"), "{kept}");
    }
}

#[test]
fn a_value_after_a_string_naming_a_credential_or_an_env_default_given_as_one_is_redacted() {
    for (code, language) in [
        // the third argument after a string naming a credential
        ("setattr(cfg, \"password\", \"hunter2pass\")", "python"),
        (
            "config.set(\"db\", \"password\", \"hunter2pass\")",
            "python",
        ),
        (
            "r.hset(\"user:1\", \"api_token\", \"hunter2pass\")",
            "python",
        ),
        (
            "_.set(cfg, \"auth.password\", \"hunter2pass\");",
            "javascript",
        ),
        // an environment lookup's default where a credential goes
        (
            "c = Client(api_key=os.getenv(\"K\", \"hunter2pass\"))",
            "python",
        ),
        (
            "c = Client(api_key=os.environ.get(\"K\", \"hunter2pass\"))",
            "python",
        ),
        (
            "h = {\"Authorization\": \"Bearer \" + getenv(\"K\", \"hunter2pass\")}",
            "python",
        ),
        // names of credentials
        ("mcp.call(bearer=\"hunter2pass\")", "python"),
        ("mcp.call(passcode=\"hunter2pass\")", "python"),
        ("mcp.call(hmac_key=\"hunter2pass\")", "python"),
        (
            "await mcp.call({encryptionKey: \"hunter2pass\"});",
            "javascript",
        ),
        ("mcp.call(master_key=\"hunter2pass\")", "python"),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert!(!stored_holds(&n, "hunter2pass"), "{code}: {n:?}");
        assert!(n.params.iter().any(|p| p.secret), "{code}");
    }
    // ordinary code keeps its values
    for (kept, language) in [
        ("setattr(cfg, \"name\", \"alice\")", "python"),
        ("config.set(\"db\", \"host\", \"db.internal\")", "python"),
        ("s = re.sub(\"a\", \"tokens\", \"some text\")", "python"),
        ("home = os.getenv(\"HOME\", \"/root\")", "python"),
        ("c = Client(path=os.getenv(\"P\", \"/tmp/x\"))", "python"),
        ("c = Client(api_key=cfg.get(\"k\", \"fallback\"))", "python"),
        ("tokens = tokenize(text)\npassword_length = 12", "python"),
        ("keyboard.press(\"Enter\")", "python"),
        (
            "spec = {bearerFormat: \"JWT\", scheme: \"bearer\"};",
            "javascript",
        ),
    ] {
        let n = norm(kept, language);
        assert!(!n.params.iter().any(|p| p.secret), "{kept}: {n:?}");
        assert!(!n.redacted_code.contains("[REDACTED]"), "{kept}");
    }
}

#[test]
fn a_credential_named_by_its_sibling_or_written_in_sql_is_redacted() {
    // the fallback tokenizer read none of these as a credential: the value was stored in the
    // code, the template or a parameter's value (docs/normalization.md, Secrets)
    for (code, language) in [
        ("os.Setenv(\"API_KEY\", \"hunter2pass\")", "go"),
        (
            "cur.execute(\"ALTER USER bob IDENTIFIED BY 'hunter2pass'\")",
            "python",
        ),
        (
            "await db.query(\"CREATE ROLE bob WITH LOGIN PASSWORD 'hunter2pass'\");",
            "javascript",
        ),
        (
            "req.Header.Set(\"Authorization\", \"Bearer hunter2pass\")",
            "go",
        ),
        ("props.setProperty(\"password\", \"hunter2pass\");", "java"),
        (
            "Connection c = DriverManager.getConnection(url, \"bob\", \"hunter2pass\");",
            "java",
        ),
        ("$pdo = new PDO($dsn, \"bob\", \"hunter2pass\");", "php"),
        ("CREATE USER bob WITH PASSWORD 'hunter2pass';", "sql"),
        ("ALTER USER bob IDENTIFIED BY 'hunter2pass';", "sql"),
        (
            "environment:\n  - POSTGRES_PASSWORD: hunter2pass\n  - POSTGRES_USER: bob",
            "yaml",
        ),
        ("cat <<EOF > cfg.yml\napi_key: hunter2pass\nEOF", "bash"),
        (
            "kubectl create secret generic s --from-literal=password=hunter2pass",
            "bash",
        ),
    ] {
        let n = norm(code, language);
        assert!(!stored_holds(&n, "hunter2pass"), "{code}: {n:?}");
        assert!(n.params.iter().any(|p| p.secret), "{code}");
    }
    for (kept, language) in [
        ("os.Setenv(\"HOME\", \"/root\")", "go"),
        ("c = pool.getConnection(\"a\", \"b\");", "java"),
        ("SELECT name FROM users WHERE id = 'abc';", "sql"),
        ("grep token: notes.txt && echo \"a: b\"", "bash"),
        ("environment:\n  - POSTGRES_USER: bob", "yaml"),
        (
            "kubectl create configmap c --from-literal=mode=fast",
            "bash",
        ),
    ] {
        let n = norm(kept, language);
        assert!(!n.params.iter().any(|p| p.secret), "{kept}: {n:?}");
        assert!(!n.redacted_code.contains("[REDACTED]"), "{kept}");
    }
}

#[test]
fn a_netrc_or_pgpass_entry_in_a_string_or_free_text_keeps_no_password() {
    for code in [
        r#"open(n, "w").write("machine h login bob password hunter2pass")"#,
        r#"open(p, "w").write("db.internal:5432:app:bob:hunter2pass")"#,
        r#"open(p, "w").write("*:*:*:bob:hunter2pass")"#,
    ] {
        let n = norm(code, "python");
        assert!(!n.redacted_code.contains("hunter2pass"), "{code}");
    }
    for (text, redacted) in [
        (
            "wrote machine h login bob password hunter2pass to ~/.netrc",
            "wrote machine h login bob password [REDACTED] to ~/.netrc",
        ),
        (
            "{\"pgpass\": \"db:5432:app:bob:hunter2pass\"}",
            "{\"pgpass\": \"db:5432:app:bob:[REDACTED]\"}",
        ),
        (
            r#"{"netrc": "machine h\nlogin bob\npassword hunter2pass\n"}"#,
            r#"{"netrc": "machine h\nlogin bob\npassword [REDACTED]\n"}"#,
        ),
        // a command in a JSON string (a tool's arguments), and one with no `-` or `=`
        (
            r#"{"cmd": "sshpass -p hunter2pass ssh h", "n": 1}"#,
            r#"{"cmd": "sshpass -p [REDACTED] ssh h", "n": 1}"#,
        ),
        (
            r#"["mysql -phunter2pass db"]"#,
            r#"["mysql -p[REDACTED] db"]"#,
        ),
        (
            "failed: aws configure set aws_secret_access_key hunter2pass",
            "failed: aws configure set aws_secret_access_key [REDACTED]",
        ),
    ] {
        assert_eq!(redact_text(text), redacted, "{text}");
    }
    for kept in [
        "the password is incorrect",
        "at 12:30:45 on fe80::1:2:3",
        "a:b:c:d:e",
    ] {
        assert_eq!(redact_text(kept), kept, "{kept}");
    }
}

#[test]
fn an_interpolated_or_tagged_string_holding_a_credential_keeps_no_copy_of_it() {
    // A piece of literal text that holds a credential by the value rules a plain string is
    // read by: that piece becomes `[REDACTED]`, the interpolations stay code.
    for (code, language, stored) in [
        (
            "const q = sql`SELECT ${a} FROM u WHERE password=hunter2pass`;",
            "js",
            "const q = sql`SELECT ${a}[REDACTED]`;",
        ),
        (
            "const q = gql`{ login(user: ${u}, token: \"hunter2pass\") }`;",
            "ts",
            "const q = gql`{ login(user: ${u}[REDACTED]`;",
        ),
        (
            "const c = `mysql -u root -phunter2pass ${db}`;",
            "js",
            "const c = `[REDACTED]${db}`;",
        ),
        (
            r#"q = f"{h} host=db password=hunter2pass""#,
            "python",
            r#"q = f"{h}[REDACTED]""#,
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}: {}", n.fallback_reason);
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!n.template.contains("hunter2pass"), "{code}");
    }
    // A variable interpolated where a credential's value goes is given as one: the literal
    // it is assigned is redacted where it is written.
    for (code, language, stored) in [
        (
            "const x = \"hunter2pass\";\nconst q = sql`SELECT 1 WHERE password=${x}`;",
            "js",
            "const x = \"[REDACTED]\";\nconst q = sql`SELECT 1 WHERE password=${x}`;",
        ),
        (
            "const t = \"hunter2pass\";\nconst q = gql`{ login(token: \"${t}\") }`;",
            "js",
            "const t = \"[REDACTED]\";\nconst q = gql`{ login(token: \"${t}\") }`;",
        ),
        (
            "x = \"hunter2pass\"\nq = f\"host=db password={x}\"",
            "python",
            "x = \"[REDACTED]\"\nq = f\"host=db password={x}\"",
        ),
    ] {
        assert_eq!(norm(code, language).redacted_code, stored, "{code}");
    }
    // Text with no credential, and a name given no value, stay.
    for (code, language) in [
        (
            "const q = sql`SELECT * FROM u WHERE id=${id} AND password=${pw}`;",
            "js",
        ),
        ("const s = `${a} ? token : ${b}`;", "js"),
        (r#"q = f"{h} max_tokens=500""#, "python"),
    ] {
        assert_eq!(norm(code, language).redacted_code, code, "{code}");
    }
}

#[test]
fn an_interpolated_string_given_as_a_credential_keeps_no_literal_text() {
    for (code, language, stored) in [
        (
            r#"client.login(token=f"{prefix}s3cr3tvalue99")"#,
            "python",
            r#"client.login(token=f"{prefix}[REDACTED]")"#,
        ),
        (
            r#"login(password=f"{user}:hunter2pass")"#,
            "python",
            r#"login(password=f"{user}[REDACTED]")"#,
        ),
        (
            "login({token: `${prefix}s3cr3tvalue99`})",
            "js",
            "login({token: `${prefix}[REDACTED]`})",
        ),
        (
            "const password = `${user}:hunter2\\npass`",
            "ts",
            "const password = `${user}[REDACTED]`",
        ),
        (
            r#"h = os.getenv("API_TOKEN", f"tok-{n}-s3cr3tvalue99")"#,
            "python",
            r#"h = os.getenv("API_TOKEN", f"[REDACTED]{n}[REDACTED]")"#,
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}: {}", n.fallback_reason);
        assert_eq!(n.redacted_code, stored, "{code}");
        let template = stored.replace("\"API_TOKEN\"", "$GETENV_ARG0");
        assert_eq!(n.template, template, "{code}");
        // the stored code read again is the same code, redacted alike
        assert_eq!(norm(stored, language).redacted_code, stored);
    }
    // An auth scheme or one separator holds no secret: kept.
    for (code, language) in [
        (
            r#"get(u, headers={"Authorization": f"Bearer {token}"})"#,
            "python",
        ),
        (
            "fetch(u, {headers: {Authorization: `Basic ${basic}`}})",
            "js",
        ),
        (r#"login(credentials=f"{user}:{pw}")"#, "python"),
    ] {
        assert_eq!(norm(code, language).redacted_code, code);
    }
    assert_eq!(
        norm(r#"h = {"Authorization": f"Bearer abc123{x}"}"#, "python").redacted_code,
        r#"h = {"Authorization": f"[REDACTED]{x}"}"#
    );
    // Not a credential's value: code, as written.
    for (code, language) in [
        (
            r#"mcp.read_file(path=f"{root}/s3cr3tvalue99.json")"#,
            "python",
        ),
        ("mcp.read_file({path: `${root}/s3cr3tvalue99.json`})", "js"),
    ] {
        assert_eq!(norm(code, language).redacted_code, code);
    }
}

/// Code giving a credential named `name` as a value joined of pieces, one of them the literal
/// `value` (docs/normalization.md, Secrets), by language.
fn joined_credentials(name: &str, value: &str) -> Vec<(String, &'static str)> {
    let mut shapes = vec![
        (format!("login({name}=\"{value}\" + suffix)"), "python"),
        (format!("login({name}=prefix + '{value}')"), "python"),
        (format!("login({name}=(\"{value}\" \"x9\"))"), "python"),
        (format!("login({name}=(\"{value}\" if a else b))"), "python"),
        (format!("login({name}=f\"{{p}}{value}\" + s)"), "python"),
        (
            format!("pw = \"{value}\" + suffix\nlogin({name}=pw)"),
            "python",
        ),
        (
            format!("pw = f\"{{p}}{value}\"\nlogin({name}=pw)"),
            "python",
        ),
        (
            format!("os.getenv(\"DB_PASSWORD\", \"{value}\" + x)"),
            "python",
        ),
        (format!("login({name}=\"{value}%s\" % x)"), "python"),
        (
            format!("login({name}=\"%s%s\" % (\"{value}\", x))"),
            "python",
        ),
        (format!("login({name}=\"{value}{{}}\".format(x))"), "python"),
        (
            format!("login({name}=\"{{}}{{p}}\".format(\"{value}\", p=x))"),
            "python",
        ),
        (
            format!("login({name}=\"{{}}{{p}}\".format(x, p=\"{value}\"))"),
            "python",
        ),
        (
            format!("login({name}=\"\".join([\"{value}\", x]))"),
            "python",
        ),
        (
            format!("login({name}=\"-\".join((\"{value}\", \"x9\")))"),
            "python",
        ),
        (
            format!("pw = \"{value}%s\" % x\nlogin({name}=pw)"),
            "python",
        ),
        (
            format!("pw = \"\".join([\"{value}\", x])\nlogin({name}=pw)"),
            "python",
        ),
        // a variable holding the format string, the separator or the list a formatting
        // call formats or joins
        (
            format!("fmt = \"{value}{{}}\"\nlogin({name}=fmt.format(x))"),
            "python",
        ),
        (
            format!("fmt = \"{value}%s\"\nlogin({name}=fmt % x)"),
            "python",
        ),
        (
            format!("fmt = \"{value}{{}}\"\nlogin({name}=fmt.replace(\"{{}}\", x))"),
            "python",
        ),
        (
            format!("sep = \"{value}\"\nlogin({name}=sep.join([a, b]))"),
            "python",
        ),
        (
            format!("parts = [\"{value}\", x]\nlogin({name}=\"\".join(parts))"),
            "python",
        ),
        // a variable interpolated, or its text stripped or encoded
        (
            format!("pw = \"{value}\"\nlogin({name}=f\"{{pw}}x\")"),
            "python",
        ),
        (
            format!("pw = \"{value}\"\nlogin({name}=pw.strip())"),
            "python",
        ),
        (
            format!("login({name}=\"{value}\".encode(\"utf-8\"))"),
            "python",
        ),
        (
            format!(
                "pw = \"{value}\"\nget(u, headers={{\"{name}\": \"Basic \" + \
                 base64.b64encode(f\"{{u}}:{{pw}}\".encode()).decode()}})"
            ),
            "python",
        ),
        (format!("pw = \"{value}\"\nlogin({name}=str(pw))"), "python"),
        // a part of it: subscripted or sliced
        (format!("pw = \"{value}\"\nlogin({name}=pw[:8])"), "python"),
        (format!("pw = \"{value}\"\nlogin({name}=pw[0])"), "python"),
        (
            format!("pw = \"{value}\"\nlogin({name}=pw[1:8].strip())"),
            "python",
        ),
        (format!("login({name}=\"{value}\"[:8])"), "python"),
        // an item or a value read from a list or a map written in place, or one interpolated
        // whole, to any depth
        (format!("login({name}=(\"{value}\",)[0])"), "python"),
        (
            format!("login({name}={{\"k\": \"{value}\"}}[\"k\"])"),
            "python",
        ),
        (
            format!("login({name}=f\"{{ {{'k': '{value}'}}['k'] }}\")"),
            "python",
        ),
        (
            format!("login({name}=f\"pre{{ {{'k': {{'j': '{value}'}}}}['k']['j'] }}\")"),
            "python",
        ),
        (format!("login({name}=f\"{{ ['{value}'] }}\")"), "python"),
    ];
    for language in ["js", "ts"] {
        shapes.extend([
            (
                format!("await mcp.login({{{name}: \"{value}\" + suffix}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: p + '{value}' + s}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: (a ? \"{value}\" : b)}})"),
                language,
            ),
            (
                format!("const pw = `${{p}}{value}`; await mcp.login({{{name}: pw}})"),
                language,
            ),
            (
                format!("let pw = \"{value}\" + s; await mcp.login({{{name}: pw}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: \"{value}\".concat(x)}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: \"a\".concat(\"{value}\", x)}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: [\"{value}\", x].join(\"\")}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: String.raw`{value}${{x}}`}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: String.raw`{value}`}})"),
                language,
            ),
            (
                format!("const pw = [\"{value}\", x].join(\"-\"); await mcp.login({{{name}: pw}})"),
                language,
            ),
            (
                format!("const f = \"{value}\"; await mcp.login({{{name}: f.concat(x)}})"),
                language,
            ),
            (
                format!(
                    "const f = \"{value}{{}}\"; await mcp.login({{{name}: f.replace(\"{{}}\", x)}})"
                ),
                language,
            ),
            (
                format!(
                    "const parts = [\"{value}\", x]; await mcp.login({{{name}: parts.join(\"\")}})"
                ),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: `${{pw}}x`}})"),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: pw.trim()}})"),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: pw.slice(0, 8)}})"),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: pw.substring(1)}})"),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: pw.substr(0, 8)}})"),
                language,
            ),
            (
                format!("const pw = \"{value}\"; await mcp.login({{{name}: pw[0]}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: \"{value}\".charAt(0)}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: `${{ {{a: \"{value}\"}}.a }}`}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: `${{ `${{ [\"{value}\"][0] }}` }}`}})"),
                language,
            ),
            (
                format!("await mcp.login({{{name}: {{a: {{b: \"{value}\"}}}}.a.b}})"),
                language,
            ),
            (
                format!(
                    "const pw = \"{value}\"; await mcp.login({{{name}: \"Basic \" + btoa(`${{u}}:${{pw}}`)}})"
                ),
                language,
            ),
        ]);
    }
    shapes
}

/// Where `value` stands in what a pattern stores of `n`: its template, its stored code or a
/// parameter's value not flagged secret.
fn stored_holds(n: &Normalized, value: &str) -> bool {
    n.template.contains(value)
        || n.redacted_code.contains(value)
        || n.params
            .iter()
            .any(|p| !p.secret && p.value_json.contains(value))
}

#[test]
fn a_literal_piece_of_a_credential_is_a_secret() {
    for (code, language) in joined_credentials("password", "hunter2secret") {
        let n = norm(&code, language);
        assert!(n.parse_ok, "{code}: {}", n.fallback_reason);
        assert!(!stored_holds(&n, "hunter2secret"), "{code}: {n:?}");
        // the stored code parses and reads again as itself, redacted alike
        let again = norm(&n.redacted_code, language);
        assert!(again.parse_ok, "{}", n.redacted_code);
        assert_eq!(again.redacted_code, n.redacted_code);
        assert_eq!(again.template, n.template, "{code}");
    }
    assert_eq!(
        norm("login(password=\"hunter2secret\" + suffix)", "python").redacted_code,
        "login(password=\"[REDACTED]\" + suffix)"
    );
    assert_eq!(
        norm("pw = f\"{p}hunter2secret\"\nlogin(password=pw)", "python").template,
        "pw = f\"{p}[REDACTED]\"\nlogin(password=pw)"
    );
    // The placeholder keeps its name (names are not hashed), the hash its literal markers.
    let n = norm(
        "await mcp.login({password: \"hunter2secret\" + suffix})",
        "ts",
    );
    assert_eq!(n.template, "await mcp.login({password: $STR + suffix})");
    assert!(n.params[0].secret);
    same(
        "await mcp.login({password: \"hunter2secret\" + suffix})",
        "await mcp.login({password: \"other\" + suffix})",
        "ts",
    );
}

#[test]
fn a_format_string_or_separator_holding_no_secret_stays() {
    for (code, language, stored) in [
        ("print(\"%s\" % x)", "python", "print(\"%s\" % x)"),
        (
            "print(\", \".join(names))",
            "python",
            "print(\", \".join(names))",
        ),
        (
            "h = {\"Authorization\": \"Bearer {}\".format(tok)}",
            "python",
            "h = {\"Authorization\": \"Bearer {}\".format(tok)}",
        ),
        (
            "login(password=\"%s:%s\" % (u, p))",
            "python",
            "login(password=\"%s:%s\" % (u, p))",
        ),
        (
            "pw = \"\".join([\"hunter2secret\", x])\nlogin(password=pw)",
            "python",
            "pw = \"\".join([\"[REDACTED]\", x])\nlogin(password=pw)",
        ),
        (
            "await mcp.login({password: [a, b].join(\":\")})",
            "js",
            "await mcp.login({password: [a, b].join(\":\")})",
        ),
        ("x = n % 7", "python", "x = n % 7"),
        (
            "pw = \"hunter2secret\"\nget(u, headers={\"Authorization\": f\"Bearer {pw}\"})",
            "python",
            "pw = \"[REDACTED]\"\nget(u, headers={\"Authorization\": f\"Bearer {pw}\"})",
        ),
        (
            "const t = \"hunter2secret\";\nfetch(u, {headers: {Authorization: `Bearer ${t}`}});",
            "js",
            "const t = \"[REDACTED]\";\nfetch(u, {headers: {Authorization: `Bearer ${t}`}});",
        ),
    ] {
        assert_eq!(norm(code, language).redacted_code, stored, "{code}");
    }
    // the formatted shapes hash as before: their literals were placeholders already
    same(
        "login(password=\"hunter2{}\".format(x))",
        "login(password=\"other{}\".format(x))",
        "python",
    );
}

#[test]
fn a_piece_of_a_value_not_given_as_a_credential_stays() {
    for (code, language) in [
        ("x = \"hello\" + suffix", "python"),
        ("print(\"token: \" + tok)", "python"),
        (
            "get(u, headers={\"Authorization\": \"Bearer \" + token})",
            "python",
        ),
        ("login(auth=user + \":\" + pw)", "python"),
        ("pw = f\"{root}/a.json\"\nread(path=pw)", "python"),
        ("r = (\"a.json\" if a else b)", "python"),
        ("fetch(u, {headers: {Authorization: 'Basic ' + b}})", "js"),
        (
            "const p = `${root}/a.json`; await mcp.read({path: p})",
            "ts",
        ),
        ("const t = a ? \"x\" : \"y\"; read({path: c ? t : d})", "ts"),
        ("login({password: (secret ? \"yes\" : \"no\") && pw})", "js"),
        // a text method's arguments are no piece of its value, another call's neither
        ("login(password=pw.encode(\"utf-8\"))", "python"),
        ("login(password=bytes(pw, \"utf-8\"))", "python"),
        ("login({password: Buffer.from(pw, \"utf8\")})", "js"),
        ("x = path.join(d, \"token.json\")\nlogin(token=x)", "python"),
        ("login({token: path.join(d, \"tok.json\")})", "js"),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, code);
        assert!(n.params.iter().all(|p| !p.secret), "{code}: {:?}", n.params);
    }
    // the condition of a conditional is no piece of its value
    let n = norm(
        "login(password=(\"a\" if \"on\" in m else \"b\"))",
        "python",
    );
    let flags: Vec<(&str, bool)> = n
        .params
        .iter()
        .map(|p| (p.value_json.as_str(), p.secret))
        .collect();
    assert_eq!(flags, [("\"a\"", true), ("\"on\"", false), ("\"b\"", true)]);
}

proptest::proptest! {
    /// Any literal piece of a value joined of pieces, given as a credential, never stands in
    /// what a pattern stores (docs/normalization.md, Secrets).
    #[test]
    fn any_literal_piece_of_a_credential_never_stands_in_the_stored_code(
        value in "[a-z]{3}[0-9]{2}[a-zA-Z]{3,12}",
        name in proptest::sample::select(vec![
            "password", "api_key", "token", "Authorization", "client_secret", "db_passwd",
        ]),
    ) {
        for (code, language) in joined_credentials(name, &value) {
            let n = norm(&code, language);
            proptest::prop_assert!(n.parse_ok, "{}", code);
            proptest::prop_assert!(!stored_holds(&n, &value), "{}: {:?}", code, n);
        }
    }
}

#[test]
fn a_credential_read_from_a_list_or_map_or_interpolated_deeper_in_the_fallback_is_redacted() {
    for (code, language) in [
        ("login(password=(\"hunter2secret\",)[0]", "python"),
        ("login(password={\"k\": \"hunter2secret\"}[\"k\"]", "python"),
        ("login({password: [\"hunter2secret\"][0]", "js"),
        ("login({password: {a: \"hunter2secret\"}.a", "js"),
        // an interpolation's strings and templates, nested, are its string's
        (
            "login(password=f\"postgres://bob:{ {'k': 'hunter2secret'}['k'] }@db\"",
            "python",
        ),
        (
            "login(password=f\"{ {\"k\": \"hunter2secret\"}[\"k\"] }\"",
            "python",
        ),
        (
            "login(password=f\"{os.getenv(\"X\", \"hunter2secret\")}\"",
            "python",
        ),
        ("login({password: `${ {a: \"hunter2secret\"}.a }`", "js"),
        (
            "login({password: `${ `${ {a: \"hunter2secret\"}.a }` }`",
            "js",
        ),
        (
            "login({password: `a${ `b${ \"}\" + `${\"hunter2secret\"}` }` }`",
            "js",
        ),
    ] {
        let n = norm(code, language);
        assert!(!n.parse_ok, "{code}");
        assert!(!stored_holds(&n, "hunter2secret"), "{code}: {n:?}");
    }
    // the key read is no credential: it stays
    let n = norm("login(password={\"k\": \"hunter2secret\"}[\"k\"]", "python");
    assert_eq!(
        n.redacted_code,
        "login(password={\"k\": \"[REDACTED]\"}[\"k\"]"
    );
    // an f-string prefix is a word of its own, and `{{` is a brace of the text
    for (code, stored) in [
        (
            "elif\"x\" in y: login(password=\"hunter2secret\"",
            "elif\"x\" in y: login(password=\"[REDACTED]\"",
        ),
        (
            "x = f\"a{{\" + \"b\"; login(password=\"hunter2secret\"",
            "x = f\"a{{\" + \"b\"; login(password=\"[REDACTED]\"",
        ),
    ] {
        assert_eq!(norm(code, "python").redacted_code, stored, "{code}");
    }
    // nesting to any depth costs a pass, with no call per level
    let deep = format!(
        "login({{password: {}\"hunter2secret\"{}",
        "`${".repeat(50_000),
        "}`".repeat(50_000)
    );
    let n = norm(&deep, "js");
    assert!(!n.redacted_code.contains("hunter2secret"));
}

#[test]
fn a_list_read_by_a_literal_index_as_a_credential_gives_that_item_alone() {
    for (code, language, stored) in [
        (
            "parts = [\"alice\", \"hunter2secret\"]\nclient.login(user=parts[0], password=parts[1])",
            "python",
            "parts = [\"alice\", \"[REDACTED]\"]\nclient.login(user=parts[0], password=parts[1])",
        ),
        (
            "parts = (\"alice\", \"hunter2secret\")\nclient.login(password=parts[1].strip())",
            "python",
            "parts = (\"alice\", \"[REDACTED]\")\nclient.login(password=parts[1].strip())",
        ),
        (
            "const parts = [\"alice\", \"hunter2secret\"]; login({user: parts[0], password: parts[1]})",
            "js",
            "const parts = [\"alice\", \"[REDACTED]\"]; login({user: parts[0], password: parts[1]})",
        ),
        // any other read may take any item: all are redacted
        (
            "parts = [\"alice\", \"hunter2secret\"]\nclient.login(user=parts[0], password=parts[i])",
            "python",
            "parts = [\"[REDACTED]\", \"[REDACTED]\"]\nclient.login(user=parts[0], password=parts[i])",
        ),
        (
            "parts = [\"alice\", \"hunter2secret\"]\nclient.login(password=parts[-1])",
            "python",
            "parts = [\"[REDACTED]\", \"[REDACTED]\"]\nclient.login(password=parts[-1])",
        ),
        (
            "parts = [\"alice\", \"hunter2secret\"]\nclient.login(password=\"\".join(parts))",
            "python",
            "parts = [\"[REDACTED]\", \"[REDACTED]\"]\nclient.login(password=\"\".join(parts))",
        ),
        // each read given as one gives its item; a piece of an item goes with every read
        (
            "p = [\"hunter2a\", \"hunter2secret\"]\nlogin(password=p[1])\nlogin(password=p[0])",
            "python",
            "p = [\"[REDACTED]\", \"[REDACTED]\"]\nlogin(password=p[1])\nlogin(password=p[0])",
        ),
        (
            "p = [\"alice\", \"x\" + \"hunter2secret\"]\nlogin(password=p[0])",
            "python",
            "p = [\"[REDACTED]\", \"[REDACTED]\" + \"[REDACTED]\"]\nlogin(password=p[0])",
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, stored, "{code}");
    }
}

#[test]
fn a_value_named_by_its_maps_name_is_a_secret() {
    for (code, language) in [
        (
            "await mcp.deploy({env: [{name: \"DB_PASSWORD\", value: \"hunter2secret\"}]})",
            "js",
        ),
        (
            "mcp.deploy(env=[{\"name\": \"API_TOKEN\", \"value\": \"hunter2secret\"}])",
            "python",
        ),
        (
            "await mcp.http({headers: [{key: \"Authorization\", value: \"hunter2secret\"}]})",
            "js",
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert!(!stored_holds(&n, "hunter2secret"), "{code}: {n:?}");
    }
    // A name that is no credential's: the value stays.
    let code = "await mcp.deploy({env: [{name: \"LOG_LEVEL\", value: \"debug\"}]})";
    assert!(norm(code, "js").redacted_code.contains("debug"));
}

#[test]
fn a_literal_joined_where_a_urls_password_goes_is_a_secret() {
    for (code, language, stored) in [
        (
            "c = connect(\"pg://bob:\" + \"hunter2secret\" + \"@db/x\")",
            "python",
            "c = connect(\"pg://bob:\" + \"[REDACTED]\" + \"@db/x\")",
        ),
        (
            "c = connect(\"pg://bob:%s@db/x\" % \"hunter2secret\")",
            "python",
            "c = connect(\"pg://bob:%s@db/x\" % \"[REDACTED]\")",
        ),
        (
            "c = connect(\"pg://bob:{}@db/x\".format(\"hunter2secret\"))",
            "python",
            "c = connect(\"pg://bob:{}@db/x\".format(\"[REDACTED]\"))",
        ),
        (
            "const c = connect(\"pg://bob:\" + \"hunter2secret\" + \"@db/x\");",
            "js",
            "const c = connect(\"pg://bob:\" + \"[REDACTED]\" + \"@db/x\");",
        ),
        (
            "const c = connect([\"pg://bob:\", \"hunter2secret\", \"@db/x\"].join(\"\"));",
            "js",
            "const c = connect([\"pg://bob:\", \"[REDACTED]\", \"@db/x\"].join(\"\"));",
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!stored_holds(&n, "hunter2secret"), "{code}: {n:?}");
    }
    // No password position: the pieces stay (a host, a path, a variable's password).
    for (code, language) in [
        ("url = \"https://\" + \"example.com\" + \"/a\"", "python"),
        (
            "c = connect(\"pg://bob:\" + pw + \"@db/\" + \"mytable\")",
            "python",
        ),
        ("url = f\"pg://bob:{pw}@db/\" + \"mytable\"", "python"),
        ("x = \"a:%s\" % \"b\"", "python"),
    ] {
        let n = norm(code, language);
        assert_eq!(n.redacted_code, code, "{code}");
    }
}

#[test]
fn a_value_interpolated_where_a_urls_password_goes_is_a_secret() {
    // The literal is redacted where it is written; the URL keeps its references
    // (`secrets.rs`, `names_a_value_given_later`), so the stored code still reads them.
    for (code, language, stored) in [
        (
            "db_pass = \"hunter2secret\"\nurl = f\"postgresql://bob:{db_pass}@db/x\"",
            "python",
            "db_pass = \"[REDACTED]\"\nurl = f\"postgresql://bob:{db_pass}@db/x\"",
        ),
        (
            "url = f\"postgresql://bob:{'hunter2secret'}@db/x\"",
            "python",
            "url = f\"postgresql://bob:{\"[REDACTED]\"}@db/x\"",
        ),
        (
            "u = \"bob\"\np = \"hunter2secret\"\nurl = f\"postgresql://{u}:{p}@db/x\"",
            "python",
            "u = \"bob\"\np = \"[REDACTED]\"\nurl = f\"postgresql://{u}:{p}@db/x\"",
        ),
        (
            "const p = \"hunter2secret\"; const url = `https://${u}:${p}@h/x`",
            "js",
            "const p = \"[REDACTED]\"; const url = `https://${u}:${p}@h/x`",
        ),
        // a user, a host or a port is none
        (
            "const h = \"db.internal\"; const url = `https://bob@${h}/x`",
            "js",
            "const h = \"db.internal\"; const url = `https://bob@${h}/x`",
        ),
        (
            "port = \"5432\"\nurl = f\"postgresql://db:{port}/x\"",
            "python",
            "port = \"5432\"\nurl = f\"postgresql://db:{port}/x\"",
        ),
    ] {
        let n = norm(code, language);
        assert!(n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!stored_holds(&n, "hunter2secret"), "{code}: {n:?}");
    }
}

#[test]
fn a_prefixed_python_string_in_the_fallback_is_named_by_its_context() {
    for prefix in ["f", "b", "r", "rb", "Fr", "u"] {
        let code = format!("login(password={prefix}\"hunter2pass\", n=1\nx = (");
        let n = norm(&code, "python");
        assert!(!n.parse_ok);
        assert_eq!(n.params[0].name, "$PASSWORD", "{code}");
        assert!(n.params[0].secret, "{code}");
        assert!(!n.redacted_code.contains("hunter2pass"), "{code}");
    }
    // not a prefix: a name before a string
    let n = norm("login(password=x\"a.json\"\ny = (", "python");
    assert_eq!(n.params[0].name, "$STR");
}

#[test]
fn a_password_echoed_into_a_command_reading_it_from_its_input_is_a_secret() {
    let (before, after) = (
        "echo hunter2secret",
        "| docker login -u bob --password-stdin",
    );
    for (code, stored) in [
        (
            format!("{before} {after}"),
            format!("echo \"[REDACTED]\" {after}"),
        ),
        (
            "printf '%s' hunter2secret | helm registry login r --password-stdin".to_owned(),
            "printf '%s' \"[REDACTED]\" | helm registry login r --password-stdin".to_owned(),
        ),
        (
            "printf hunter2secret | oras login -u bob --password-stdin".to_owned(),
            "printf \"[REDACTED]\" | oras login -u bob --password-stdin".to_owned(),
        ),
        (
            "echo -n 'hunter2secret' | podman login --password-stdin".to_owned(),
            "echo -n \"[REDACTED]\" | podman login --password-stdin".to_owned(),
        ),
        (
            "echo hunter2-se!cret | \\\n  gh auth login --with-token".to_owned(),
            "echo \"[REDACTED]\" | \\\n  gh auth login --with-token".to_owned(),
        ),
    ] {
        let n = norm(&code, "bash");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!n.template.contains("hunter2"), "{code}");
        assert!(
            n.params
                .iter()
                .all(|p| p.secret || p.value_json == "\"%s\""),
            "{code}"
        );
        for language in ["python", "js"] {
            let run = norm(&format!("run({})", serde_json::json!(code)), language);
            assert_eq!(
                run.params.iter().map(|p| p.secret).collect::<Vec<_>>(),
                [true]
            );
            assert!(!run.redacted_code.contains("hunter2"), "{code}");
        }
    }
    // A bare word stays code, hashed as before (another password is another pattern); a
    // quoted one was a parameter, and is a secret one.
    let hash = |code: &str| norm(code, "bash").code_hash;
    let login = "| docker login --password-stdin";
    assert_ne!(
        hash(&format!("echo a1 {login}")),
        hash(&format!("echo b2 {login}"))
    );
    assert_eq!(
        hash(&format!("echo 'a1' {login}")),
        hash(&format!("echo 'b2' {login}"))
    );
    for code in [
        "echo hello | grep h",
        "echo \"$PW\" | docker login --password-stdin",
        "printf '%s\\n' $(cat pw.txt) | docker login --password-stdin",
        "echo hello || docker login --password-stdin",
        "echo hello; docker login --password-stdin < pw.txt",
        "echo hello\ndocker login --password-stdin < pw.txt",
        "cat pw.txt | docker login --password-stdin",
    ] {
        let n = norm(code, "bash");
        assert_eq!(n.redacted_code, code);
        assert!(n.params.iter().all(|p| !p.secret), "{code}");
        let run = norm(&format!("run({})", serde_json::json!(code)), "python");
        assert!(!run.params[0].secret, "{code}");
    }
}

#[test]
fn a_literal_piece_of_a_credential_in_the_fallback_is_a_secret() {
    // code the parser rejects: the fallback reads the value given as a credential
    for (code, language) in [
        ("login(password=(\"hunter2\" \"secretpw\")", "python"),
        (
            "login(password=\"x\" + \"hunter2secret\", user=\"bob\"",
            "python",
        ),
        ("login(password=p + \"hunter2secret\", n=1\nx = (", "python"),
        (
            "login(password=(\n  \"hunter2\"\n  \"secretpw\"\n), user=\"bob\"\ny = (",
            "python",
        ),
        ("set_password(\"a\" + \"hunter2secret\")\ny = (", "python"),
        (
            "await mcp.login({password: \"a\" + \"hunter2secret\", user: \"bob\"",
            "ts",
        ),
        (
            "await mcp.login({password: p + `${x}hunter2secret`, user: \"bob\"",
            "js",
        ),
        // a variable assigned a literal, given as a credential later
        ("pw = \"hunter2secretpw\"\nlogin(password=pw", "python"),
        (
            "const pw = \"hunter2secretpw\";\nawait mcp.login({password: pw, user: \"bob\"",
            "js",
        ),
    ] {
        let n = norm(code, language);
        assert!(!n.parse_ok, "{code}");
        assert!(!stored_holds(&n, "hunter2"), "{code}: {n:?}");
        assert!(!stored_holds(&n, "secretpw"), "{code}: {n:?}");
        let flags: Vec<(&str, bool)> = n
            .params
            .iter()
            .filter(|p| p.name == "$USER")
            .map(|p| (p.value_json.as_str(), p.secret))
            .collect();
        assert!(flags.iter().all(|(_, secret)| !secret), "{code}: {flags:?}");
    }
    // the hash keeps its placeholders: another password is the same pattern
    let hash = |code: &str| norm(code, "python").code_hash;
    assert_eq!(
        hash("login(password=(\"a1\" \"b2\")"),
        hash("login(password=(\"c3\" \"d4\")")
    );
    for (code, language) in [
        ("x = \"hello\" + \"world\"\ny = (", "python"),
        ("print(\"token: \" + \"abc\")\ny = (", "python"),
        (
            "login(password=f(x, \"db_name\"), n=\"a\" + \"b\"\ny = (",
            "python",
        ),
        ("login(auth=user + \":\" + pw, n=1\ny = (", "python"),
        ("if password == \"x\": y = \"a\" + \"b\"\nz = (", "python"),
        ("f({path: \"a/\" + name, n: 1", "js"),
    ] {
        let n = norm(code, language);
        assert!(!n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, code);
        assert!(n.params.iter().all(|p| !p.secret), "{code}: {:?}", n.params);
    }
}

/// Code the parser rejects (a `)` or `}` missing) giving a credential named `name` as a value
/// joined of pieces, one of them the literal `value`, in place or through a variable.
fn fallback_joined_credentials(name: &str, value: &str) -> Vec<(String, &'static str)> {
    let mut shapes = vec![
        (
            format!("pw = \"\".join([\"{value}\", x])\nclient.login({name}=pw\n"),
            "python",
        ),
        (
            format!("pw = \"{value}\" + x\nclient.login({name}=pw\n"),
            "python",
        ),
        (
            format!("pw = (\n  \"{value}\"\n  + x\n)\nclient.login({name}=pw\n"),
            "python",
        ),
        (
            format!("client.login({name}=\"\".join([\"{value}\", x])\n"),
            "python",
        ),
        (
            format!("client.login({name}=\"{value}{{}}\".format(x)\n"),
            "python",
        ),
        (
            format!("client.login({name}=\"{{}}{{}}\".format(\"{value}\", x)\n"),
            "python",
        ),
        (
            format!("fmt = \"{value}{{}}\"\nclient.login({name}=fmt.format(x)\n"),
            "python",
        ),
        (
            format!("fmt = \"{value}%s\"\nclient.login({name}=fmt % x\n"),
            "python",
        ),
        (
            format!("pw = \"%s%s\" % (\"{value}\", x)\nclient.login({name}=pw\n"),
            "python",
        ),
        (
            format!("parts = [\"{value}\", x]\nclient.login({name}=\"\".join(parts)\n"),
            "python",
        ),
        (
            format!("pw = \"{value}\"\nclient.login({name}=f\"{{pw}}x\"\n"),
            "python",
        ),
        (
            format!("pw = \"{value}\"\nclient.login({name}=pw[:8]\n"),
            "python",
        ),
        (format!("client.login({name}=\"{value}\"[:8]\n"), "python"),
    ];
    for language in ["js", "ts"] {
        shapes.extend([
            (
                format!("const f = \"{value}\";\nlogin({{{name}: f.concat(x)}};\n"),
                language,
            ),
            (
                format!("const f = \"{value}\";\nlogin({{{name}: f + x}};\n"),
                language,
            ),
            (
                format!("let pw = \"{value}\" + s;\nlogin({{{name}: pw}};\n"),
                language,
            ),
            (
                format!("const f = [\"{value}\", x].join(\"\");\nlogin({{{name}: f}};\n"),
                language,
            ),
            (
                format!("login({{{name}: [\"{value}\", x].join(\"\")}};\n"),
                language,
            ),
            (
                format!("login({{{name}: \"\".concat(\"{value}\", x)}};\n"),
                language,
            ),
            (
                format!("const parts = [\"{value}\", x];\nlogin({{{name}: parts.join(\"\")}};\n"),
                language,
            ),
            (
                format!("const f = \"{value}\";\nlogin({{{name}: `${{f}}x`}};\n"),
                language,
            ),
            (
                format!("const pw = \"{value}\";\nlogin({{{name}: pw.slice(0, 8)}};\n"),
                language,
            ),
            (
                format!("const pw = \"{value}\";\nlogin({{{name}: pw[0]}};\n"),
                language,
            ),
        ]);
    }
    shapes
}

proptest::proptest! {
    /// In code the parser rejects too, a literal piece of a value given as a credential, in
    /// place or through a variable, never stands in what a pattern stores
    /// (docs/normalization.md, Secrets and Fallback).
    #[test]
    fn any_literal_piece_of_a_credential_in_the_fallback_never_stands_in_the_stored_code(
        value in "[a-z]{3}[0-9]{2}[a-zA-Z]{3,12}",
        name in proptest::sample::select(vec![
            "password", "api_key", "token", "Authorization", "client_secret", "db_passwd",
        ]),
    ) {
        for (code, language) in fallback_joined_credentials(name, &value) {
            let n = norm(&code, language);
            proptest::prop_assert!(!n.parse_ok, "{}", code);
            proptest::prop_assert!(!stored_holds(&n, &value), "{}: {:?}", code, n);
        }
    }
}

#[test]
fn a_separator_or_format_of_a_credential_in_the_fallback_stays() {
    // the separator a credential is joined with holds no secret: kept, the item redacted
    for (code, stored) in [
        (
            "client.login(password=\"\".join([\"hunter2hunter2\", x])\n",
            "client.login(password=\"\".join([\"[REDACTED]\", x])\n",
        ),
        (
            "pw = \"-\".join([\"hunter2hunter2\", x])\nclient.login(password=pw\n",
            "pw = \"-\".join([\"[REDACTED]\", x])\nclient.login(password=pw\n",
        ),
        (
            "client.login(password=\"{}{}\".format(\"hunter2hunter2\", x)\n",
            "client.login(password=\"{}{}\".format(\"[REDACTED]\", x)\n",
        ),
    ] {
        let n = norm(code, "python");
        assert!(!n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, stored, "{code}");
    }
    // a value not given as a credential, or passed to another call, stays
    for (code, language) in [
        ("pw = \"\".join([\"a.json\", x])\nread(path=pw\n", "python"),
        ("login(password=get(\"db\", \"x\".join(y)), n=1\n", "python"),
        ("f(user=\"bob\", n=\"-\".join([\"a\", b])\ny = (", "python"),
        (
            "const f = [\"a.json\", x].join(\"/\");\nread({path: f};\n",
            "js",
        ),
        // a piece that holds no secret, given as a credential, stays too
        ("login(password=\"\" + x\n", "python"),
        ("h = {\"Authorization\": \"Bearer \" + tok\n", "python"),
        (
            "fetch(u, {headers: {Authorization: \"Bearer \" + tok}\n",
            "js",
        ),
        ("login(password=\"%s\" % x\n", "python"),
    ] {
        let n = norm(code, language);
        assert!(!n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, code);
        assert!(n.params.iter().all(|p| !p.secret), "{code}: {:?}", n.params);
    }
    // the pieces were placeholders already: the hash is as before
    let hash = |code: &str| norm(code, "python").code_hash;
    assert_eq!(
        hash("pw = \"a1\" + x\nclient.login(password=pw\n"),
        hash("pw = \"b2\" + x\nclient.login(password=pw\n")
    );
}

#[test]
fn the_word_after_a_password_switch_of_a_command_that_prompts_is_no_credential() {
    for (code, stored) in [
        (
            "psql --host db --password mydb",
            "psql --host db --password mydb",
        ),
        (
            "PGPASSWORD=s3cretPassw0rd psql -U bob --password mydb -c 'select 1'",
            "PGPASSWORD=\"[REDACTED]\" psql -U bob --password mydb -c 'select 1'",
        ),
        (
            "pg_dumpall --password -f out.sql",
            "pg_dumpall --password -f out.sql",
        ),
        (
            "mysql -u root --password mydb",
            "mysql -u root --password mydb",
        ),
        (
            "mysqldump --password db1 > out.sql",
            "mysqldump --password db1 > out.sql",
        ),
        ("mysql -p mydb", "mysql -p mydb"),
        // a value after `=` or attached is one, and any other command's `--password` takes one
        (
            "mysql --password=s3cretPassw0rd mydb",
            "mysql --password=\"[REDACTED]\" mydb",
        ),
        ("mysql -ps3cretPassw0rd mydb", "mysql -p\"[REDACTED]\" mydb"),
        (
            "psql mydb; mytool --password s3cretPassw0rd",
            "psql mydb; mytool --password \"[REDACTED]\"",
        ),
        (
            "./run --db psql --password s3cretPassw0rd",
            "./run --db psql --password \"[REDACTED]\"",
        ),
    ] {
        let n = norm(code, "bash");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!n.template.contains("s3cret"), "{code}");
        let run = norm(&format!("run({})", serde_json::json!(code)), "python");
        assert_eq!(run.params[0].secret, code.contains("s3cret"), "{code}");
    }
    // the database stays a parameter, as it was, so the code hashes as before
    let n = norm("psql --host db --password mydb", "bash");
    assert_eq!(n.template, "psql --host db --password $STR");
    let older = norm("psql --host db --password \"[REDACTED]\"", "bash");
    assert_eq!(older.code_hash, n.code_hash);
}

#[test]
fn a_prompting_command_is_named_past_the_commands_that_run_it() {
    // `sudo`, `env`, `nice`... run the command written after them: its name is that one's
    for code in [
        "sudo psql --password mydb",
        "sudo -u postgres psql --password mydb",
        "sudo -Eu postgres /usr/bin/psql --password mydb",
        "sudo --user postgres psql --password mydb",
        "sudo --user=postgres -i psql --password mydb",
        "env X=1 psql --password mydb",
        "env -u HOME PGHOST=db psql --password mydb",
        "time psql --password mydb",
        "nice -n 5 psql --password mydb",
        "nohup nice psql --password mydb &",
        "exec psql --password mydb",
        "command psql --password mydb",
        "doas -u postgres psql --password mydb",
        "timeout 30 pg_dump --password mydb",
        "timeout -s KILL 30 pg_dump --password mydb",
        "ls | xargs -n 1 psql --password mydb",
        "sudo mysql --password mydb",
    ] {
        let n = norm(code, "bash");
        assert_eq!(n.redacted_code, code, "{code}");
        assert!(n.params.iter().all(|p| !p.secret), "{code}: {:?}", n.params);
    }
    // a wrapper's value or words are no command's name; any other command's `--password`
    // takes a value
    for (code, stored) in [
        (
            "sudo -u psql ./run --password s3cretPassw0rd",
            "sudo -u psql ./run --password \"[REDACTED]\"",
        ),
        (
            "timeout psql ./run --password s3cretPassw0rd",
            "timeout psql ./run --password \"[REDACTED]\"",
        ),
        (
            "sudo ./run --db psql --password s3cretPassw0rd",
            "sudo ./run --db psql --password \"[REDACTED]\"",
        ),
        (
            "env psql=1 ./run --password s3cretPassw0rd",
            "env psql=1 ./run --password \"[REDACTED]\"",
        ),
        (
            "sudo psql mydb; sudo mytool --password s3cretPassw0rd",
            "sudo psql mydb; sudo mytool --password \"[REDACTED]\"",
        ),
    ] {
        let n = norm(code, "bash");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(n.params.iter().any(|p| p.secret), "{code}");
    }
}

#[test]
fn a_credentials_path_is_no_credential() {
    for (code, language, stored, name) in [
        (
            "app --password-file /etc/pw.txt run",
            "bash",
            "app --password-file /etc/pw.txt run",
            "$PASSWORD_FILE",
        ),
        (
            "app --token-file=/run/tok",
            "bash",
            "app --token-file=/run/tok",
            "$TOKEN_FILE",
        ),
        (
            "app --secret-file 's.json'",
            "bash",
            "app --secret-file 's.json'",
            "$SECRET_FILE",
        ),
        (
            "docker run -e POSTGRES_PASSWORD_FILE=/run/secrets/pg postgres",
            "bash",
            "docker run -e POSTGRES_PASSWORD_FILE=/run/secrets/pg postgres",
            "$POSTGRES_PASSWORD_FILE",
        ),
        (
            "client.login(password_file=\"/etc/pw.txt\")",
            "python",
            "client.login(password_file=\"/etc/pw.txt\")",
            "$PASSWORD_FILE",
        ),
        (
            "await mcp.login({tokenPath: \"/run/tok\"})",
            "js",
            "await mcp.login({tokenPath: \"/run/tok\"})",
            "$TOKEN_PATH",
        ),
    ] {
        let n = norm(code, language);
        assert_eq!(n.redacted_code, stored, "{code}");
        assert_eq!(
            n.params
                .iter()
                .map(|p| (p.name.as_str(), p.secret))
                .collect::<Vec<_>>(),
            [(name, false)],
            "{code}"
        );
    }
    // a credential given inline is one, and so is a credential-shaped value given as a path
    for (code, stored) in [
        (
            "app --password s3cretPassw0rd --password-file /etc/pw.txt",
            "app --password \"[REDACTED]\" --password-file /etc/pw.txt",
        ),
        (
            "app --token-file ghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "app --token-file \"[REDACTED]\"",
        ),
    ] {
        assert_eq!(norm(code, "bash").redacted_code, stored, "{code}");
    }
    // the path stays a parameter, as it was, so the code hashes as before
    let n = norm("app --password-file /etc/pw.txt", "bash");
    let older = norm("app --password-file \"[REDACTED]\"", "bash");
    assert_eq!(older.code_hash, n.code_hash);
    assert_eq!(older.template, n.template);
}

#[test]
fn the_word_after_a_credential_flag_that_takes_no_value_is_no_credential() {
    for (code, stored) in [
        (
            "echo s3cretPassw0rd | docker login --username bob --password-stdin quay.io",
            "echo \"[REDACTED]\" | docker login --username bob --password-stdin quay.io",
        ),
        (
            "docker login --username bob --password-stdin quay.io < pw.txt",
            "docker login --username bob --password-stdin quay.io < pw.txt",
        ),
        (
            "cat tok.txt | gh auth login --with-token --hostname ghe.example.com",
            "cat tok.txt | gh auth login --with-token --hostname ghe.example.com",
        ),
        (
            "echo s3cretPassw0rd | mytool login --token-stdin registry.example.com",
            "echo \"[REDACTED]\" | mytool login --token-stdin registry.example.com",
        ),
        (
            "echo s3cretPassw0rd | docker login --password-stdin=true quay.io",
            "echo \"[REDACTED]\" | docker login --password-stdin=true quay.io",
        ),
        ("psql --no-password db1", "psql --no-password db1"),
        // a flag that takes one still gives a credential
        (
            "mytool --password s3cretPassw0rd --password-stdin quay.io",
            "mytool --password \"[REDACTED]\" --password-stdin quay.io",
        ),
    ] {
        let n = norm(code, "bash");
        assert_eq!(n.redacted_code, stored, "{code}");
        assert!(!n.template.contains("s3cret"), "{code}");
        // a command line in a string is no secret for the word after such a flag either
        let run = norm(&format!("run({})", serde_json::json!(code)), "python");
        let echoed = code.contains("s3cret");
        assert_eq!(run.params[0].secret, echoed, "{code}");
    }
    // The word stays a parameter, as it was, so the code hashes as before: a registry alike
    // another, and alike the code an older build stored (`"[REDACTED]"` in its place).
    let n = norm("docker login -u bob --password-stdin quay.io", "bash");
    assert_eq!(n.template, "docker login -u bob --password-stdin $STR");
    assert_eq!(
        n.params
            .iter()
            .map(|p| (p.value_json.as_str(), p.secret))
            .collect::<Vec<_>>(),
        [("\"quay.io\"", false)]
    );
    let older = norm(
        "docker login -u bob --password-stdin \"[REDACTED]\"",
        "bash",
    );
    assert_eq!(older.code_hash, n.code_hash);
    assert_eq!(older.template, n.template);
    assert_eq!(
        norm("docker login -u bob --password-stdin ghcr.io", "bash").code_hash,
        n.code_hash
    );
}

#[test]
fn only_a_command_that_takes_user_colon_password_has_one_after_u() {
    for code in [
        "curl -u bob:pw https://x",
        "wget --user=bob:pw https://x",
        "sudo curl --user bob:pw x",
    ] {
        let n = norm(code, "bash");
        assert_eq!(
            n.params
                .iter()
                .map(|p| (p.name.as_str(), p.secret))
                .collect::<Vec<_>>(),
            [("$USER", true)],
            "{code}"
        );
        assert!(!n.redacted_code.contains("bob:pw"), "{code}");
    }
    for code in [
        "docker run -u 1000:1000 img",
        "podman run --user=1000:1000 img",
        "docker run -u 0:0 img && curl https://x",
        "curl https://x; docker exec -u 1000:1000 c ls",
    ] {
        let n = norm(code, "bash");
        assert!(n.params.iter().all(|p| !p.secret), "{code}: {:?}", n.params);
        assert_eq!(n.redacted_code, code);
    }
    let run = norm(r#"run("docker run -u 1000:1000 img")"#, "python");
    assert!(!run.params[0].secret);
}

// ---- steps (docs/normalization.md, Steps) ---------------------------------------------------

fn edges(code: &str, language: &str) -> Vec<(usize, usize)> {
    let n = norm(code, language);
    assert_eq!(n.steps.len(), n.tool_calls.len());
    n.steps
        .iter()
        .enumerate()
        .flat_map(|(to, s)| s.depends_on.iter().map(move |&from| (from, to)))
        .collect()
}

#[test]
fn steps_read_references_in_every_form() {
    let code = "const r1 = await mcp.search({q: \"x\"});\n\
        const r2 = await mcp.get({id: r1, name: r1.name, ex: r1[\"Exchange Rate\"], t: `5 * ${r1.rate}`});\n\
        const {a, b: c} = await mcp.third({});\n\
        const y = r2.data;\n\
        await mcp.fourth({a, c, y, z: true, w: foo});";
    let n = norm(code, "js");
    let s = &n.steps;
    assert_eq!(s.len(), 4);
    assert_eq!(s[0].arguments[0].kind, ArgKind::Parameter);
    assert_eq!(s[0].arguments[0].parameters, vec!["$Q"]);
    let paths: Vec<&str> = s[1]
        .arguments
        .iter()
        .map(|a| a.sources[0].path.as_str())
        .collect();
    assert_eq!(paths, vec!["", ".name", "[\"Exchange Rate\"]", ".rate"]);
    assert!(s[1].arguments.iter().all(|a| a.kind == ArgKind::Reference));
    assert_eq!(s[1].depends_on, vec![0]);
    assert!(s[2].depends_on.is_empty());
    assert_eq!(s[3].depends_on, vec![1, 2]);
    assert_eq!(s[3].arguments[0].sources[0].path, ".a");
    assert_eq!(s[3].arguments[1].sources[0].path, ".b");
    assert_eq!(s[3].arguments[2].sources[0].path, ".data");
    assert_eq!(s[3].arguments[3].kind, ArgKind::Literal);
    assert_eq!(s[3].arguments[4].kind, ArgKind::Unknown);
    assert!(s.iter().all(|s| s.flow_known));
}

#[test]
fn steps_in_python_and_typescript() {
    let py = "r1 = await mcp.search(q=\"x\")\npath = \"a.json\"\n\
        r2 = mcp.read_file(path=path, body=f\"hi {r1['x']}\")\nmcp.other(r2.data, 3)\n";
    let n = norm(py, "python");
    assert_eq!(n.steps[1].arguments[0].parameters, vec!["$PATH"]);
    assert_eq!(n.steps[1].arguments[1].sources[0].path, "[\"x\"]");
    assert_eq!(edges(py, "python"), vec![(0, 1), (1, 2)]);
    let ts = "const r: any = await mcp.a({});\nawait mcp.b({x: (r as any).v});";
    assert_eq!(edges(ts, "ts"), vec![(0, 1)]);
}

#[test]
fn independent_steps_have_no_edges() {
    let code = "const a = await mcp.x({p: 1});\nconst b = await mcp.y({q: \"s\"});";
    assert!(edges(code, "js").is_empty());
}

#[test]
fn reassignment_uses_the_latest_binding_before_the_use() {
    let code = "let r = await mcp.a({});\nr = await mcp.b({x: r});\nawait mcp.c({y: r});";
    assert_eq!(edges(code, "js"), vec![(0, 1), (1, 2)]);
}

#[test]
fn unreadable_flow_degrades_never_fails() {
    let code = "const r = await mcp.list({});\n\
        for (const it of r.items) { await mcp.get({id: it.id}); }\n\
        r.items.map(x => mcp.put({v: x}));\nmcp[name]({});";
    let n = norm(code, "js");
    assert_eq!(n.tool_calls, vec!["list", "get", "put"]);
    assert!(n.steps[0].flow_known);
    assert!(!n.steps[1].flow_known && !n.steps[2].flow_known);
    // The loop variable is each element of what it iterates: step 0's `.items`.
    assert_eq!(n.steps[1].arguments[0].kind, ArgKind::Reference);
    assert_eq!(n.steps[1].arguments[0].sources[0].path, ".items[*].id");
    assert_eq!(n.steps[2].depends_on, vec![0]);
    // Iterating what no step gives: unknown.
    let free = norm(
        "for (const it of items) { await mcp.get({id: it.id}); }",
        "js",
    );
    assert_eq!(free.steps[0].arguments[0].kind, ArgKind::Unknown);
    // Unparsable code: the tools in call order, nothing else.
    let broken = norm("const r = await mcp.a({x: 1}; mcp.b(r)", "js");
    assert!(!broken.parse_ok);
    assert_eq!(broken.steps.len(), broken.tool_calls.len());
    assert!(broken
        .steps
        .iter()
        .all(|s| !s.flow_known && s.arguments.is_empty()));
}

#[test]
fn nested_calls_and_dispatch() {
    let code =
        "await mcp.outer({v: await mcp.inner({}), w: 2});\nawait mcp.call(\"dyn\", {p: \"v\"});";
    let n = norm(code, "js");
    assert_eq!(n.tool_calls, vec!["outer", "inner", "dyn"]);
    assert_eq!(n.steps[0].depends_on, vec![1]);
    assert_eq!(n.steps[2].arguments.len(), 1);
    assert_eq!(n.steps[2].arguments[0].name, "p");
}

#[test]
fn a_subscript_by_a_string_names_the_tool() {
    // MCP tool names that are no identifiers ("resolve-library-id") are called by subscript
    let js = norm(
        "const r = await mcp[\"resolve-library-id\"]({name: \"react\"});\n\
         await tools.docs['get-library-docs']({id: r.id});",
        "js",
    );
    assert_eq!(
        js.tool_calls,
        vec!["resolve-library-id", "docs:get-library-docs"]
    );
    assert_eq!(js.steps[1].depends_on, vec![0]);
    let py = norm(
        "r = await mcp[\"get-weather\"](city=\"Paris\")\nmcp['send-mail'](body=r)",
        "python",
    );
    assert_eq!(py.tool_calls, vec!["get-weather", "send-mail"]);
    assert_eq!(py.steps[1].depends_on, vec![0]);
    // the name stays code: two tools never hash alike
    let other = norm(
        "r = await mcp[\"get-news\"](city=\"Paris\")\nmcp['send-mail'](body=r)",
        "python",
    );
    assert_ne!(py.code_hash, other.code_hash);
    // a computed or interpolated subscript cannot be read statically: no tool call
    for code in [
        "await mcp[name]({})",
        "await mcp[`get-${x}`]({})",
        "await other[\"x\"]({})",
    ] {
        assert!(norm(code, "js").tool_calls.is_empty(), "{code}");
    }
    assert!(norm("await mcp[f\"get-{x}\"]()", "python")
        .tool_calls
        .is_empty());
    // a template string without a substitution is a plain string
    assert_eq!(
        norm("await mcp[`get-weather`]({})", "js").tool_calls,
        vec!["get-weather"]
    );
    assert!(norm("await mcp[`get-${x}`]({}); {{", "js")
        .tool_calls
        .is_empty());
    // the token fallback reads the same shape
    let broken = norm("await mcp[\"get-weather\"]({city: 1}; mcp.b(", "js");
    assert!(!broken.parse_ok);
    assert_eq!(broken.tool_calls, vec!["get-weather", "b"]);
}

#[test]
fn an_sdk_client_or_a_wrapper_calling_a_named_tool_is_a_tool_call() {
    // The official MCP SDKs' clients, and wrappers generated around them, name the tool in an
    // argument: the name is read, stays code (two tools never hash alike), and the step's
    // arguments are the tool's, not the name.
    let py = norm(
        "r = await session.call_tool(\"get_weather\", {\"city\": \"Paris\"})\n\
         await session.call_tool(\"send_mail\", arguments={\"body\": r.content})",
        "python",
    );
    assert!(py.parse_ok);
    assert_eq!(py.tool_calls, vec!["get_weather", "send_mail"]);
    let names: Vec<&str> = py.steps[0]
        .arguments
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, vec!["city"]);
    assert_eq!(py.steps[0].arguments[0].parameters, vec!["$CITY"]);
    assert_eq!(py.steps[1].arguments[0].name, "body");
    assert_eq!(py.steps[1].depends_on, vec![0]);
    let other = norm(
        "r = await session.call_tool(\"get_news\", {\"city\": \"Paris\"})\n\
         await session.call_tool(\"send_mail\", arguments={\"body\": r.content})",
        "python",
    );
    assert_ne!(py.code_hash, other.code_hash);
    assert!(!py.template.contains("$CALL_TOOL"), "{}", py.template);
    let keywords = norm(
        "await session.call_tool(name=\"get_weather\", arguments={\"city\": \"Paris\"})",
        "python",
    );
    assert_eq!(keywords.tool_calls, vec!["get_weather"]);
    assert_eq!(keywords.steps[0].arguments[0].name, "city");

    let js = norm(
        "const r = await client.callTool({name: \"get-weather\", arguments: {city: \"Paris\"}});\n\
         await callMCPTool('google_drive__get_document', {id: r.id});\n\
         await mcp.callTool({\"name\": \"list_files\"});",
        "js",
    );
    assert_eq!(
        js.tool_calls,
        vec!["get-weather", "google_drive__get_document", "list_files"]
    );
    assert_eq!(js.steps[0].arguments[0].name, "city");
    assert_eq!(js.steps[1].depends_on, vec![0]);
    assert!(js.steps[2].arguments.is_empty());
    let renamed = norm(
        "const r = await client.callTool({name: \"get-news\", arguments: {city: \"Paris\"}});\n\
         await callMCPTool('google_drive__get_document', {id: r.id});\n\
         await mcp.callTool({\"name\": \"list_files\"});",
        "js",
    );
    assert_ne!(js.code_hash, renamed.code_hash);

    // a computed name cannot be read statically; other functions are not tool callers
    for code in [
        "await session.call_tool(name, {})",
        "await client.callTool({name: toolName, arguments: {}})",
        "await client.callTool({name: `get-${x}`})",
        "await recall_tool(\"x\")",
        "await client.call(\"x\", {})",
        "await session.tool(\"x\")",
    ] {
        assert!(norm(code, "js").tool_calls.is_empty(), "{code}");
    }
    // the token fallback reads the same shapes
    let broken = norm(
        "await client.callTool({name: \"get-weather\", arguments: {city: 1}}); \
         session.call_tool(\"b\", {}); mcp.call_tool(\"c\"); f(",
        "js",
    );
    assert!(!broken.parse_ok);
    assert_eq!(broken.tool_calls, vec!["get-weather", "b", "c"]);
}

#[test]
fn tool_callers_are_a_verb_then_tool() {
    use super::tree::is_tool_caller;
    for name in [
        "call_tool",
        "callTool",
        "callMCPTool",
        "call_mcp_tool",
        "invokeTool",
        "run_tool",
        "executeTool",
        "use_tool",
        "CALL_TOOL",
    ] {
        assert!(is_tool_caller(name), "{name}");
    }
    for name in [
        "tool",
        "call",
        "calltools",
        "recall_tool",
        "protocol",
        "get_tool",
        "call_tool_2",
        "é_tool",
    ] {
        assert!(!is_tool_caller(name), "{name}");
    }
}

#[test]
fn a_list_item_read_by_a_literal_index_in_the_fallback_is_the_only_secret() {
    for (code, language, stored) in [
        (
            "parts = [\"alice\", \"hunter2secret\"]\nlogin(password=parts[1]",
            "python",
            "parts = [\"alice\", \"[REDACTED]\"]\nlogin(password=parts[1]",
        ),
        (
            "parts = ['alice', 'hunter2secret', ]\nlogin(user=parts[0], password=parts[-1]",
            "python",
            "parts = ['alice', \"[REDACTED]\", ]\nlogin(user=parts[0], password=parts[-1]",
        ),
        (
            "const parts = [\"alice\", \"hunter2secret\"];\nlogin({password: parts[1]",
            "js",
            "const parts = [\"alice\", \"[REDACTED]\"];\nlogin({password: parts[1]",
        ),
        // a non-literal index, a list with another item, a negative index in JS: every item
        (
            "parts = [\"alice\", \"hunter2secret\"]\nlogin(password=parts[i]",
            "python",
            "parts = [\"[REDACTED]\", \"[REDACTED]\"]\nlogin(password=parts[i]",
        ),
        (
            "parts = [\"alice\", u, \"hunter2secret\"]\nlogin(password=parts[2]",
            "python",
            "parts = [\"[REDACTED]\", u, \"[REDACTED]\"]\nlogin(password=parts[2]",
        ),
        (
            "const parts = [\"alice\", \"hunter2secret\"];\nlogin({password: parts[-1]",
            "js",
            "const parts = [\"[REDACTED]\", \"[REDACTED]\"];\nlogin({password: parts[-1]",
        ),
        // two items read: both
        (
            "p = [\"alice\", \"hunter2secret\", \"x\"]\nlogin(password=p[1], token=p[2]",
            "python",
            "p = [\"alice\", \"[REDACTED]\", \"[REDACTED]\"]\nlogin(password=p[1], token=p[2]",
        ),
    ] {
        let n = norm(code, language);
        assert!(!n.parse_ok, "{code}");
        assert_eq!(n.redacted_code, stored, "{code}");
    }
}

#[test]
fn an_unclosed_string_of_escaped_quotes_in_the_fallback_costs_one_pass() {
    // `"\"\"\"...`: each quote opens a string the same line leaves unclosed; read once each,
    // not once for every quote before it (no timing assert: the quadratic scan took minutes)
    let code = format!("\"{}", "\\\"".repeat(1 << 19));
    let n = norm(&code, "sh");
    assert!(!n.parse_ok);
    let code = format!("x = '{}", "\\'".repeat(1 << 19));
    assert!(!norm(&code, "python").parse_ok);
    let code = format!("x = f\"{}", "\\\"".repeat(1 << 19));
    assert!(!norm(&code, "python").parse_ok);
    let code = format!("x = (`{}", "\\`".repeat(1 << 19));
    assert!(!norm(&code, "js").parse_ok);
}

/// (argument name, sources as (step, path)) of step `index`.
fn sources_of(code: &str, language: &str, index: usize) -> Vec<(String, Vec<(usize, String)>)> {
    norm(code, language).steps[index]
        .arguments
        .iter()
        .map(|a| {
            let sources = a.sources.iter().map(|s| (s.step, s.path.clone())).collect();
            (a.name.clone(), sources)
        })
        .collect()
}

#[test]
fn a_call_in_a_function_given_to_a_call_feeds_the_outer_step() {
    // The outer call consumes what the callback returns: the inner calls' outputs
    // (docs/normalization.md, Steps). Before, the callback read as unknown and no edge.
    for (code, language) in [
        ("await mcp.a({f: xs.map(i => mcp.b({id: i}))})", "js"),
        (
            "await mcp.a({f: await Promise.all(xs.map(async (i) => await mcp.b({id: i})))})",
            "js",
        ),
        (
            "await mcp.a(Promise.all(xs.map(function (i) { return mcp.b({id: i}); })))",
            "ts",
        ),
        ("mcp.a(f=[mcp.b(id=i) for i in xs])", "python"),
        ("mcp.a(f=list(map(lambda i: mcp.b(id=i), xs)))", "python"),
    ] {
        assert_eq!(edges(code, language), vec![(1, 0)], "{code}");
        let n = norm(code, language);
        assert!(n.steps[0].flow_known && !n.steps[1].flow_known, "{code}");
    }
    // A block body returns what its `return`s give, read where they are written.
    let code = "const ys = await Promise.all(xs.map(async (i) => {\n\
        const r = await mcp.b({id: i});\n  return r.body;\n}));\nawait mcp.a({ys});";
    assert_eq!(
        sources_of(code, "js", 1),
        [("ys".into(), vec![(0, ".body".into())])]
    );
    // A call the callback makes but does not return feeds nothing; nor does a test or an order.
    for code in [
        "await mcp.a({f: xs.map(i => { mcp.b({id: i}); return i; })})",
        "await mcp.a({f: xs.filter(i => mcp.b({id: i}))})",
        "await mcp.a({f: xs.map(i => { const g = () => mcp.b({}); return i; })})",
    ] {
        assert!(edges(code, "js").is_empty(), "{code}");
    }
    assert!(edges("mcp.a(f=sorted(xs, key=lambda i: mcp.b(id=i)))", "python").is_empty());
}

#[test]
fn a_local_functions_result_reads_what_it_returns() {
    let js = "async function main() { const r1 = await mcp.a(); return r1.id; }\n\
        const z = await main();\nawait mcp.b({z});";
    assert_eq!(
        sources_of(js, "js", 1),
        [("z".into(), vec![(0, ".id".into())])]
    );
    let py = "def helper():\n    r = mcp.a()\n    return r['x']\nmcp.b(x=helper())";
    assert_eq!(
        sources_of(py, "python", 1),
        [("x".into(), vec![(0, "[\"x\"]".into())])]
    );
}

#[test]
fn a_name_bound_in_a_function_or_block_stays_there() {
    // Before, scopes were ignored: the inner `r` hid the outer one from `b`, which read step 1
    // (no data flows from it) and not step 0.
    for (code, language) in [
        (
            "const r = await mcp.a(); async function f() { const r = await mcp.c(); }\n\
             await mcp.b({x: r});",
            "js",
        ),
        (
            "const r = await mcp.a(); { let r = await mcp.c(); }\nawait mcp.b({x: r});",
            "js",
        ),
        (
            "const r = await mcp.a(); const f = (r) => 1; mcp.c({});\nawait mcp.b({x: r});",
            "js",
        ),
        (
            "r = mcp.a()\ndef f():\n    r = mcp.c()\n    return 1\nmcp.b(x=r)",
            "python",
        ),
        ("r = mcp.a()\nf = lambda r: mcp.c()\nmcp.b(x=r)", "python"),
    ] {
        assert_eq!(edges(code, language), vec![(0, 2)], "{code}");
    }
    // A JS assignment without a declaration changes the outer name (in a function, maybe).
    let code = "let r = await mcp.a(); function f() { r = mcp.c(); }\nawait mcp.b({x: r});";
    assert_eq!(edges(code, "js"), vec![(0, 2), (1, 2)]);
}

#[test]
fn a_name_assigned_in_a_branch_holds_either_value_past_it() {
    for (code, language, want) in [
        (
            "let r = await mcp.a(); if (c) { r = await mcp.b(); }\nawait mcp.c({x: r});",
            "js",
            vec![(0, 2), (1, 2)],
        ),
        (
            "let r = await mcp.a(); if (c) { r = await mcp.b(); } else { r = await mcp.d(); }\n\
             await mcp.c({x: r});",
            "js",
            vec![(0, 3), (1, 3), (2, 3)],
        ),
        (
            "let r = await mcp.a();\nif (x) { r = await mcp.b(); if (y) { r = await mcp.d(); } }\n\
             await mcp.c({x: r});",
            "js",
            vec![(0, 3), (1, 3), (2, 3)],
        ),
        (
            "r = mcp.a()\nif c:\n    r = mcp.b()\nmcp.c(x=r)",
            "python",
            vec![(0, 2), (1, 2)],
        ),
        (
            "r = None\nif c:\n    r = mcp.b()\nelse:\n    r = mcp.d()\nmcp.c(x=r)",
            "python",
            vec![(0, 2), (1, 2)],
        ),
        (
            "r = mcp.a()\nfor i in xs:\n    r = mcp.b(prev=i)\nmcp.c(x=r)",
            "python",
            vec![(0, 2), (1, 2)],
        ),
    ] {
        assert_eq!(edges(code, language), want, "{code}");
    }
    // Inside the branch, after the assignment, only the new value; a name declared in the
    // branch is its own, and an unconditional reassignment replaces.
    let code = "let r = await mcp.a(); if (c) { r = await mcp.b(); await mcp.d({r}); }";
    assert_eq!(edges(code, "js"), vec![(1, 2)]);
    let code = "let r = await mcp.a(); if (x) { let r = await mcp.b(); r = await mcp.d(); }\n\
        await mcp.c({x: r});";
    assert_eq!(edges(code, "js"), vec![(0, 3)]);
    let code = "let r = await mcp.a({});\nr = await mcp.b({});\nawait mcp.c({y: r});";
    assert_eq!(edges(code, "js"), vec![(1, 2)]);
}

#[test]
fn what_is_added_to_a_name_is_read_with_it() {
    for (code, language) in [
        (
            "const r = await mcp.a(); let s = \"\"; s += r.text; await mcp.b({s});",
            "js",
        ),
        (
            "const r = await mcp.a(); const o = {}; o.x = r.id; await mcp.b({o});",
            "js",
        ),
        (
            "const r = await mcp.a(); const o = {}; o[\"k\"].v = r; await mcp.b({o});",
            "js",
        ),
        (
            "const r = await mcp.a(); const out = []; out.push(r.id); await mcp.b({out});",
            "js",
        ),
        ("r = mcp.a()\ns = ''\ns += r['t']\nmcp.b(x=s)", "python"),
        ("r = mcp.a()\nd = {}\nd['k'] = r['v']\nmcp.b(x=d)", "python"),
        (
            "r = mcp.a()\nout = []\nout.append(r)\nmcp.b(x=out)",
            "python",
        ),
        ("r = mcp.a()\nd = {}\nd.update(r)\nmcp.b(x=d)", "python"),
    ] {
        assert_eq!(edges(code, language), vec![(0, 1)], "{code}");
    }
    // Calls per element collected in a loop: the send reads each.
    let code =
        "results = []\nfor x in xs:\n    results.append(mcp.get(id=x))\nmcp.send(data=results)";
    assert_eq!(edges(code, "python"), vec![(0, 1)]);
    // A tool call is no adding method of the name it is called on.
    let code = "await mcp.add({a: 1}); await mcp.b({m: mcp});";
    assert!(edges(code, "js").is_empty());
}

#[test]
fn a_rest_pattern_reads_the_whole_value() {
    for (code, language) in [
        (
            "const {id, ...rest} = await mcp.a(); await mcp.b({rest});",
            "js",
        ),
        (
            "const [first, ...others] = await mcp.a(); await mcp.b({others});",
            "js",
        ),
        ("first, *rest = mcp.a()\nmcp.b(x=rest)", "python"),
    ] {
        assert_eq!(
            sources_of(code, language, 1)[0].1,
            vec![(0, String::new())],
            "{code}"
        );
    }
}

#[test]
fn a_name_bound_in_many_functions_reads_in_bounded_time() {
    // 50,000 functions each binding `r`, then 50,000 uses of the outer `r`: each use passes
    // over at most MAX_SCOPE_SKIPS bindings out of scope, then reads unknown (no timing assert).
    let mut code = String::from("const r = await mcp.a();\n");
    for _ in 0..50_000 {
        code.push_str("function f() { const r = 1; }\n");
    }
    for _ in 0..200 {
        code.push_str("await mcp.b({x: r});\n");
    }
    let n = norm(&code, "js");
    assert!(n.parse_ok);
    assert_eq!(n.steps[1].arguments[0].kind, ArgKind::Unknown);
}

#[test]
fn each_settled_result_reads_its_own_call() {
    // Before, `results[0]` read both calls: a false edge from `b`.
    let code = "const results = await Promise.allSettled([mcp.a(), mcp.b()]);\n\
        await mcp.c({x: results[0].value});";
    assert_eq!(edges(code, "js"), vec![(0, 2)]);
}

/// tree-sitter's error recovery held this 186-byte input (found by `fuzz_normalize`'s
/// `code_shaped_noise`) for minutes, growing to gigabytes; its parse is now cut at a budget
/// of progress checks and the code goes to the fallback, the same way on every run.
#[test]
fn a_parse_that_outgrows_its_budget_goes_to_the_fallback() {
    let code = r#"$z+"a=[}"`2`
e"2"8 j*=}/ $l$n
7  "

ku=[,dqx:$
". " \z=[x`4 *=6\+{4\r="z'($=={:9.[`
=
"'9x4"*
\
'}${=t]=+`9$ "=}\"
=bok[*v\ *ml)="'
=$$e}
}
i;'[=""
9" $f  $$]"i=a/"=+"}
:36{3  x =*\a$
k""#;
    let first = normalize(code, "typescript").expect("normalized");
    assert!(!first.parse_ok);
    assert_eq!(first.fallback_reason, "the parser gave up");
    assert_eq!(normalize(code, "typescript").expect("again"), first);
}

/// The budget is far above what ordinary code takes: a megabyte of chained calls parses.
#[test]
fn a_megabyte_of_ordinary_code_parses_within_the_budget() {
    let js: String = (0..20_000)
        .map(|i| {
            format!(
                "const v{i} = await mcp.t{}({{a: v{}.items[0].id}});\n",
                i % 50,
                i / 2
            )
        })
        .collect();
    let py: String = (0..20_000)
        .map(|i| {
            format!(
                "v{i} = await mcp.t{}(a=v{}['items'][0]['id'])\n",
                i % 50,
                i / 2
            )
        })
        .collect();
    assert!(js.len() > 1_000_000 && py.len() > 900_000);
    assert!(normalize(&js, "javascript").expect("js").parse_ok);
    assert!(normalize(&py, "python").expect("python").parse_ok);
}

#[test]
fn a_promise_callback_reads_the_promised_value_not_its_elements() {
    // `.then(f)` gives `f` the call's output itself (no list: `[*]` was read before) and is
    // what `f` returns; before, `mcp.a().then(...)` started where the call does and read as
    // the whole output of step 0.
    for code in [
        "const n = await mcp.a({q: \"x\"}).then(r => r.x);\nawait mcp.b({v: n});",
        "const n = await mcp.a({q: \"x\"}).then(({x}) => x);\nawait mcp.b({v: n});",
        "const p = mcp.a({q: \"x\"});\nconst n = await p.then(r => r.x);\nawait mcp.b({v: n});",
        "const n = await mcp.a({}).then(function (r) { return r.x; });\nawait mcp.b({v: n});",
        "const n = await mcp.a({}).then(r => r).then(d => d.x);\nawait mcp.b({v: n});",
        "const n = await mcp.a({}).then(r => r.x).finally(() => done());\nawait mcp.b({v: n});",
    ] {
        assert_eq!(
            sources_of(code, "js", 1),
            [("v".into(), vec![(0, ".x".into())])],
            "{code}"
        );
    }
    // A call in the callback reads the value; a rejection handler's error is no output.
    let code = "await mcp.a({}).then(r => mcp.b({id: r.id}));";
    assert_eq!(
        sources_of(code, "js", 1),
        [("id".into(), vec![(0, ".id".into())])]
    );
    let code = "await mcp.a({}).catch(e => mcp.b({m: e.message}));";
    assert!(edges(code, "js").is_empty(), "{code}");
    // A method call on a tool call's result is not the tool call: its callback is read.
    let code = "await mcp.c({ids: mcp.a({}).items.map(i => mcp.b({id: i.id}))});";
    assert_eq!(edges(code, "js"), vec![(1, 0), (2, 0), (1, 2)]);
}

#[test]
fn a_python_global_or_nonlocal_assigned_in_a_function_is_the_outer_name() {
    // Before, the assignment was local to the function: `b` read the module's `None`
    // (unknown) or its earlier step, never step `a`.
    for (code, want) in [
        (
            "r = None\ndef load():\n    global r\n    r = mcp.a(q='x')\nload()\nmcp.b(v=r)",
            vec![(0, 1)],
        ),
        // It may run or not: the earlier value too.
        (
            "r = mcp.z()\ndef load():\n    global r\n    r = mcp.a(q='x')\nload()\nmcp.b(v=r)",
            vec![(0, 2), (1, 2)],
        ),
        (
            "def outer():\n    r = mcp.z()\n    def inner():\n        nonlocal r\n        r = mcp.a()\n    \
             inner()\n    return mcp.b(v=r)",
            vec![(0, 2), (1, 2)],
        ),
        // Without the declaration, the function's own name.
        (
            "r = mcp.z()\ndef load():\n    r = mcp.a(q='x')\nload()\nmcp.b(v=r)",
            vec![(0, 2)],
        ),
        // A nested function's own `r` is not the declared one.
        (
            "r = mcp.z()\ndef f():\n    global r\n    def g():\n        r = mcp.a()\nmcp.b(v=r)",
            vec![(0, 2)],
        ),
    ] {
        assert_eq!(edges(code, "python"), want, "{code}");
    }
}

#[test]
fn a_clause_after_the_one_a_name_is_assigned_in_reads_what_it_held_before() {
    // `else` runs instead of `if`: before, it read the `if`'s assignment (a wrong edge).
    for (code, language, want) in [
        (
            "r = mcp.a(q='x')\nif c:\n    r = mcp.b(q='y')\nelse:\n    mcp.c(v=r)",
            "python",
            vec![(0, 2)],
        ),
        (
            "r = mcp.a()\nif c:\n    r = mcp.b()\nelif d:\n    mcp.c(v=r)\nelse:\n    mcp.d(v=r)",
            "python",
            vec![(0, 2), (0, 3)],
        ),
        (
            "let r = await mcp.a({q: \"x\"});\n\
             if (c) { r = await mcp.b({q: \"y\"}); } else { await mcp.c({v: r}); }",
            "js",
            vec![(0, 2)],
        ),
        (
            "let r = await mcp.a({});\n\
             if (c) { r = await mcp.b({}); } else if (d) { await mcp.c({v: r}); }",
            "js",
            vec![(0, 2)],
        ),
        (
            "r = mcp.a()\nmatch x:\n    case 1:\n        r = mcp.b()\n    case _:\n        mcp.c(v=r)",
            "python",
            vec![(0, 2)],
        ),
        // A handler may run after the body assigned: either value.
        (
            "r = mcp.a()\ntry:\n    r = mcp.b()\nexcept E:\n    mcp.c(v=r)",
            "python",
            vec![(0, 2), (1, 2)],
        ),
        (
            "let r = await mcp.a({});\ntry { r = await mcp.b({}); } catch (e) { await mcp.c({v: r}); }",
            "js",
            vec![(0, 2), (1, 2)],
        ),
        // A case may fall through: either value.
        (
            "let r = await mcp.a({});\nswitch (x) { case 1: r = await mcp.b({}); case 2: await mcp.c({v: r}); }",
            "js",
            vec![(0, 2), (1, 2)],
        ),
        // Past the statement, either value, as before.
        (
            "r = mcp.a()\nif c:\n    r = mcp.b()\nelse:\n    mcp.c(v=r)\nmcp.d(v=r)",
            "python",
            vec![(0, 2), (0, 3), (1, 3)],
        ),
    ] {
        assert_eq!(edges(code, language), want, "{code}");
    }
}

#[test]
fn an_assignment_in_more_branches_than_the_cap_reads_as_unknown_never_wrong() {
    // Up to the cap every branch is joined; past it the value assigned is unknown: the
    // clauses after the assignment's past the cap (the outer `else`) are not looked for.
    let nested = |n: usize, outer_else: bool| {
        let mut code = String::from("let r = await mcp.a({});\nif (c) {\n");
        code.push_str(&"if (c) {\n".repeat(n - 1));
        code.push_str("r = await mcp.b({});\n");
        code.push_str(&"}\n".repeat(n));
        if outer_else {
            code.push_str("else { await mcp.d({v: r}); }\n");
        }
        code.push_str("await mcp.c({v: r});");
        code
    };
    assert_eq!(edges(&nested(9, false), "js"), vec![(0, 2), (1, 2)]);
    assert_eq!(edges(&nested(32, true), "js"), vec![(0, 2), (0, 3), (1, 3)]);
    // Past the cap the assignment's value is dropped: what the name held before stays.
    assert_eq!(edges(&nested(40, true), "js"), vec![(0, 2), (0, 3)]);
}

#[test]
fn a_long_chain_of_clauses_keeps_every_edge_past_it_and_none_into_a_later_clause() {
    // 100 `elif`s or `case`s each assigning: past the statement every value; in the final
    // `else`, only what the name held before it (the clauses are found by the walk, not by
    // looking through the statement's children for each assignment).
    let mut py = String::from("r = mcp.a()\nif c0:\n    r = mcp.b()\n");
    for i in 1..100 {
        py.push_str(&format!("elif c{i}:\n    r = mcp.b()\n"));
    }
    py.push_str("else:\n    mcp.d(v=r)\nmcp.c(v=r)\n");
    let all = edges(&py, "python");
    assert!(all.contains(&(0, 101)) && all.iter().filter(|e| e.1 == 101).count() == 1);
    assert_eq!(all.iter().filter(|e| e.1 == 102).count(), 101);
    let mut js = String::from("let r = await mcp.a({});\nswitch (x) {\n");
    for i in 0..100 {
        js.push_str(&format!("case {i}: r = await mcp.b({{}}); break;\n"));
    }
    js.push_str("}\nawait mcp.c({v: r});");
    assert_eq!(edges(&js, "js").len(), 101);
}

#[test]
fn a_name_rebound_by_with_as_reads_no_step() {
    // Before, `r` still read step a after `with open(p) as r:` rebound it (a wrong edge).
    let code = "r = mcp.a()\nwith open(p) as r:\n    mcp.b(v=r)\nmcp.c(v=r)";
    assert!(edges(code, "python").is_empty(), "{code}");
    let code = "r = mcp.a()\nwith open(p) as f:\n    mcp.b(v=r)";
    assert_eq!(edges(code, "python"), vec![(0, 1)]);
}
