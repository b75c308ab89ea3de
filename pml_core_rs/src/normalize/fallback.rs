//! The token-level fallback for unknown languages and for code the parser rejects or that
//! nests too deeply. It is coarser than the tree walk but deterministic and linear: literals
//! become placeholders (named from a preceding `key:` / `key =` / `callee(`), whitespace and
//! comments are dropped, everything else hashes as written. No variable renaming.

use std::borrow::Cow;
use std::collections::HashMap;

use super::canonical::{self, Canonical};
use super::language::Lang;
use super::literal::{self, JsonType};
use super::secrets::{is_name_byte, word_end};
use super::tree::{is_tool_caller, DISPATCH_METHODS, MAX_CHAIN, TOOL_ROOTS};
use super::{Extracted, RawParam, MAX_PARAMS, NORMALIZER_VERSION};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    Number,
    Str,
    Punct,
}

#[derive(Clone, Copy)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

struct Style {
    hash_comments: bool,
    slash_comments: bool,
    backticks: bool,
    python: bool,
}

fn style(lang: Option<Lang>) -> Style {
    match lang {
        Some(Lang::Python) => Style {
            hash_comments: true,
            slash_comments: false,
            backticks: false,
            python: true,
        },
        Some(_) => Style {
            hash_comments: false,
            slash_comments: true,
            backticks: true,
            python: false,
        },
        None => Style {
            hash_comments: true,
            slash_comments: true,
            backticks: true,
            python: false,
        },
    }
}

pub(super) fn normalize_tokens(code: &str, language: &str, lang: Option<Lang>) -> Extracted {
    let style = style(lang);
    let tokens = lex(code, &style);
    let text = |t: &Token| &code[t.start..t.end];
    let mut canon = Canonical::new(NORMALIZER_VERSION, language, "tokens", code.len());
    let mut params: Vec<RawParam> = Vec::new();
    let mut param_count = 0usize;
    let mut tool_calls = Vec::new();
    let mut code_strings: Vec<usize> = Vec::new(); // token indexes of tool-name strings
    let mut root_call_paren = None; // the `(` of the last call read from a tool root
                                    // A language no parser reads (a shell's, most often): a credential's value written as a
                                    // shell writes it (`PGPASSWORD=pw`, `--api-key pw`, `-u user:pw`) is a secret parameter,
                                    // whatever its quotes (docs/normalization.md, Secrets).
    let shell_secrets = if lang.is_none() {
        shell_secret_values(&tokens, code)
    } else {
        Vec::new()
    };
    // A password a command reads from its input (`echo pw | docker login --password-stdin`) is
    // listed as a secret that stays code: hashed as before, redacted (`stdin_passwords`).
    let mut stdin_secrets = match lang {
        None => stdin_passwords(&tokens, code, false)
            .into_iter()
            .filter(|s| {
                !shell_secrets
                    .iter()
                    .any(|t| t.secret && t.start < s.end && s.start < t.end)
            })
            .collect(),
        Some(_) => Vec::new(),
    }
    .into_iter()
    .peekable();
    let mut shell_secrets = shell_secrets.into_iter().peekable();
    let mut inside_until = 0usize; // the end of the shell secret the loop is inside
    let mut listed_until = 0usize; // the end of the stdin password listed whole
    let closes = if lang.is_some() {
        closing_brackets(&tokens, code)
    } else {
        Vec::new()
    };
    let mut credential = ValuePieces::default();
    // The value a variable is being assigned (`pw = "..." + x`), and the literals each
    // variable was last assigned, whole or as pieces: secrets once the variable is given as a
    // credential (`login(password=pw`), as in the parsed path.
    let mut assignment = ValuePieces::default();
    let mut assigning: Option<&str> = None;
    let mut assigned: HashMap<&str, Vec<usize>> = HashMap::new();
    // whether each variable's pieces are the items of a list written whole (`is_flat_list`),
    // read once for each assignment
    let mut flat: HashMap<&str, bool> = HashMap::new();
    for (i, token) in tokens.iter().enumerate() {
        if token.start < inside_until {
            continue;
        }
        let piece = lang.is_some() && credential.piece(&tokens, i, code, &closes);
        if lang.is_some() && !credential.inside && names_credential_value(&tokens, i, code, &style)
        {
            credential.start();
        }
        let assigned_piece = lang.is_some() && assignment.piece(&tokens, i, code, &closes);
        if !assignment.inside {
            assigning = None;
            if let Some(variable) = lang.and(assignment_at(&tokens, i, code)) {
                assignment.start();
                assigning = Some(variable);
                assigned.insert(variable, Vec::new());
                flat.remove(variable);
            }
        }
        if piece && matches!(token.kind, Kind::Word | Kind::Str) {
            // a variable given as a piece, itself or interpolated (`f"{pw}..."`, `${pw}`)
            let names = match token.kind {
                Kind::Word => vec![text(token)],
                _ => interpolated_names(&tokens, i, code, &style),
            };
            // a list's item read by a literal index (`parts[1]`): that item alone
            let index = match token.kind {
                Kind::Word => literal_index(&tokens, i, code, &style),
                _ => None,
            };
            for name in names {
                let Some(pieces) = assigned.get_mut(name) else {
                    continue;
                };
                let item = index.and_then(|index| {
                    let listed = *flat
                        .entry(name)
                        .or_insert_with(|| is_flat_list(pieces, &params, code));
                    let len = isize::try_from(pieces.len()).ok()?;
                    let at = if index < 0 { len + index } else { index };
                    listed.then_some(usize::try_from(at).ok()?)
                });
                match item {
                    Some(at) => {
                        // the other items stay for a later use
                        if let Some(piece) = pieces.get_mut(at) {
                            if let Some(raw) = params.get_mut(*piece) {
                                raw.named_credential = true;
                            }
                            *piece = usize::MAX;
                        }
                    }
                    None => {
                        // flagged once: a later use finds none left, so uses cost no more
                        // than pieces
                        for at in std::mem::take(pieces) {
                            if let Some(raw) = params.get_mut(at) {
                                raw.named_credential = true;
                            }
                        }
                    }
                }
            }
        }
        // the token is the stdin password whole: its parameter, if it is one, is a secret
        let mut stdin_password = false;
        while stdin_secrets.next_if(|s| s.start < token.start).is_some() {}
        if let Some(secret) = stdin_secrets.next_if(|s| s.start < token.end) {
            let whole = (secret.start, secret.end) == (token.start, token.end)
                && matches!(token.kind, Kind::Str | Kind::Number);
            if whole {
                stdin_password = true;
            } else {
                listed_until = secret.end;
                params.push(RawParam {
                    start: secret.start,
                    end: secret.end,
                    json_type: JsonType::String,
                    value_json: String::new(),
                    string_value: None,
                    context: Some(secret.name),
                    overflow: true,
                    named_credential: true,
                    fragment: false,
                });
            }
        }
        while shell_secrets.next_if(|s| s.start < token.start).is_some() {}
        if let Some(secret) = shell_secrets.next_if(|s| s.start < token.end) {
            // a value attached to its flag (`-pSECRET`) starts inside the flag's word
            if secret.start > token.start {
                canon.token(&code.as_bytes()[token.start..secret.start]);
            }
            inside_until = secret.end;
            let written = &code[secret.start..secret.end];
            let value = match token.kind {
                Kind::Str if (token.start, token.end) == (secret.start, secret.end) => {
                    decode_string(written, &style)
                }
                _ => None,
            }
            .unwrap_or_else(|| written.to_owned());
            let overflow = param_count >= MAX_PARAMS;
            if overflow {
                canon.tagged(canonical::TAG_CODE_STRING, value.as_bytes());
            } else {
                param_count += 1;
                canon.marker(canonical::TAG_STRING_PARAM);
            }
            params.push(RawParam {
                start: secret.start,
                end: secret.end,
                json_type: JsonType::String,
                value_json: serde_json::Value::String(value.clone()).to_string(),
                string_value: Some(value),
                // the word after a flag that takes no value (`--password-stdin quay.io`) is
                // a parameter as it was, but no credential's (`takes_no_value`); a
                // credential's path keeps its name, as any other value
                context: secret.named.then_some(secret.name),
                overflow,
                named_credential: secret.secret || stdin_password,
                fragment: false,
            });
            continue;
        }
        if token.kind == Kind::Word && TOOL_ROOTS.contains(&text(token)) {
            if let Some((tool, name_index, paren)) = tool_call_at(&tokens, i, code) {
                tool_calls.push(tool);
                code_strings.extend(name_index);
                root_call_paren = Some(paren);
            }
        } else if token.kind == Kind::Word
            && is_tool_caller(text(token))
            && tokens.get(i + 1).is_some_and(|t| text(t) == "(")
            && root_call_paren != Some(i + 1)
        {
            // `session.call_tool("x", ...)`, `callMCPTool("x", ...)`: as the parsed path
            if let Some((tool, name_index)) = named_at(&tokens, i + 1, code) {
                tool_calls.push(tool);
                code_strings.push(name_index);
            }
        }
        let next_is_colon = tokens.get(i + 1).is_some_and(|n| text(n) == ":");
        let value = match token.kind {
            Kind::Str if !next_is_colon && !code_strings.contains(&i) => {
                decode_string(text(token), &style).map(|s| {
                    (
                        JsonType::String,
                        serde_json::Value::String(s.clone()).to_string(),
                        Some(s),
                    )
                })
            }
            Kind::Number => literal::parse_number(text(token), false, style.python)
                .map(|(json_type, value)| (json_type, value, None)),
            _ => None,
        };
        match (token.kind, value) {
            (_, Some((json_type, value_json, string_value))) => {
                let overflow = param_count >= MAX_PARAMS;
                if overflow {
                    // Past the cap the literal is code, hashed by value (see the tree path).
                    match &string_value {
                        Some(s) => canon.tagged(canonical::TAG_CODE_STRING, s.as_bytes()),
                        None => canon.token(text(token).as_bytes()),
                    }
                } else {
                    param_count += 1;
                    canon.marker(if json_type == JsonType::String {
                        canonical::TAG_STRING_PARAM
                    } else {
                        canonical::TAG_NUMBER_PARAM
                    });
                }
                // a piece holding no secret (`user + ":" + pw`) stays, as in the parsed path
                let no_secret = string_value.as_deref().is_some_and(super::holds_no_secret);
                // the string a formatting call formats or joins with (`password="".join(`) is
                // a piece of the value, not the value its context names, as in the parsed path,
                // and so is a piece of a credential's value that holds no secret followed by
                // more of it (`"Authorization": "Bearer " + tok`, `password="%s" % x`)
                let continued = tokens.get(i + 1).is_some_and(|next| {
                    !matches!(text(next), "," | ";" | ")" | "]" | "}")
                        && !code.as_bytes()[token.end..next.start].contains(&b'\n')
                });
                let receiver =
                    formatting_call_at(&tokens, i + 3, code) || (piece && no_secret && continued);
                let raw = RawParam {
                    start: token.start,
                    end: token.end,
                    json_type,
                    value_json,
                    string_value,
                    context: context_name(&tokens, i, code, &style).filter(|_| !receiver),
                    overflow,
                    named_credential: stdin_password
                        || (piece && !no_secret)
                        || (token.kind == Kind::Str && named_by_sibling(&tokens, i, code, &style)),
                    fragment: false,
                };
                // a literal inside a stdin password listed whole is redacted with it
                if (!overflow || raw.is_secret()) && token.start >= listed_until {
                    let whole = lang.and(assigned_variable(&tokens, i, code));
                    let variable = whole.or(assigning.filter(|_| assigned_piece && !no_secret));
                    if let Some(variable) = variable {
                        let pieces = assigned.entry(variable).or_default();
                        if whole.is_some() {
                            pieces.clear();
                        }
                        pieces.push(params.len());
                        flat.remove(variable);
                    }
                    params.push(raw);
                }
            }
            (Kind::Str, None) => match decode_string(text(token), &style) {
                Some(s) => canon.tagged(canonical::TAG_CODE_STRING, s.as_bytes()),
                None => canon.token(text(token).as_bytes()),
            },
            _ => canon.token(text(token).as_bytes()),
        }
    }
    Extracted {
        code_hash: canon.hash(),
        params,
        tool_calls,
        steps: None,
    }
}

/// The literal index the name at token `i` is read by (`parts[1]`; in Python `parts[-1]`
/// too, counted from the end), if any. Constant cost.
fn literal_index(tokens: &[Token], i: usize, code: &str, style: &Style) -> Option<isize> {
    let text = |at: usize| tokens.get(at).map(|t| &code[t.start..t.end]);
    if text(i + 1)? != "[" {
        return None;
    }
    let negative = style.python && text(i + 2)? == "-";
    let number = i + 2 + usize::from(negative);
    let digits = text(number)?;
    if tokens[number].kind != Kind::Number
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || text(number + 1)? != "]"
    {
        return None;
    }
    let index: isize = digits.parse().ok()?;
    Some(if negative { -index } else { index })
}

/// Whether the literals a variable was assigned (`pieces`, indexes into `params`) are the
/// items of one list written whole, in order, and nothing else (`parts = ["alice", "pw"]`),
/// so that a literal index names one of them; a list with any other item (`[user, "pw"]`),
/// pieces joined (`"a" + "b"`) or a list inside one are not. Linear in the list's text.
fn is_flat_list(pieces: &[usize], params: &[RawParam], code: &str) -> bool {
    let trimmed = |from: usize, to: usize| code[from..to].trim();
    let Some(spans) = pieces
        .iter()
        .map(|&at| params.get(at).map(|p| (p.start, p.end)))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
        return false;
    };
    let opens = code[..first.0].trim_end();
    let opened = opens
        .strip_suffix('[')
        .is_some_and(|before| before.trim_end().ends_with('='));
    let closes = code[last.1..].trim_start();
    let closed = closes.starts_with(']')
        || closes
            .strip_prefix(',')
            .is_some_and(|rest| rest.trim_start().starts_with(']'));
    opened
        && closed
        && spans
            .windows(2)
            .all(|w| w[0].1 <= w[1].0 && trimmed(w[0].1, w[1].0) == ",")
}

/// The variable the literal at token `i` is assigned whole to (`pw = "..."`, `const pw =
/// "...";`): the literal ends its statement (a line break, `;` or the end follows). Constant
/// cost.
fn assigned_variable<'c>(tokens: &[Token], i: usize, code: &'c str) -> Option<&'c str> {
    let text = |t: &Token| &code[t.start..t.end];
    let equals = &tokens[i.checked_sub(1)?];
    let name = &tokens[i.checked_sub(2)?];
    let ends = tokens.get(i + 1).map_or(true, |next| {
        text(next) == ";" || code.as_bytes()[tokens[i].end..next.start].contains(&b'\n')
    });
    (text(equals) == "=" && name.kind == Kind::Word && ends).then(|| text(name))
}

/// The value the fallback is inside, read as the parsed path reads a value joined of pieces
/// (docs/normalization.md, Secrets): a value given as a credential (after `name=`, `name:` or
/// `name(` whose name is a credential's, `names_credential_value`) or assigned to a variable
/// (`pw = ...`, `assignment_at`), up to a `,`, `;`, `:`, line break or closing bracket
/// outside its own brackets. Each literal or name in it outside a call's brackets is a piece
/// of it (`password="..." + x`, `password=("..." "...")`), and so is one in the brackets of a
/// formatting call (`formatting_call_at`: `"".join(["...", x])`, `"...{}".format(x)`,
/// `["...", x].join("")`); one passed to another call (`password=get("db")`) is not.
#[derive(Default)]
struct ValuePieces {
    /// Inside one.
    inside: bool,
    /// The brackets opened in it: whether each joins its items into the value (a grouping
    /// `(`, a formatting call's, a list it joins), or not (another call's, a subscript, an
    /// object).
    brackets: Vec<bool>,
    /// How many of `brackets` do not join.
    calls: usize,
}

impl ValuePieces {
    /// A value starts after the token just read.
    fn start(&mut self) {
        self.inside = true;
        self.brackets.clear();
        self.calls = 0;
    }

    /// Read token `i` (`closes`: `closing_brackets`); whether it is a piece of the value this
    /// is inside. Constant cost.
    fn piece(&mut self, tokens: &[Token], i: usize, code: &str, closes: &[usize]) -> bool {
        if !self.inside {
            return false;
        }
        let text = |t: &Token| &code[t.start..t.end];
        let token = &tokens[i];
        let t = text(token);
        let line_break = i > 0 && code.as_bytes()[tokens[i - 1].end..token.start].contains(&b'\n');
        if self.brackets.is_empty()
            && (line_break || matches!(t, "," | ";" | ":" | ")" | "]" | "}"))
        {
            self.inside = false;
            return false;
        }
        match t {
            "(" | "[" | "{" => {
                // `f(`, `x[`, `a)(`, `{...}[`: a call or a subscript, not a grouping
                let applied = i.checked_sub(1).is_some_and(|p| {
                    tokens[p].kind == Kind::Word || matches!(text(&tokens[p]), ")" | "]" | "}")
                });
                let joins = match t {
                    "(" => {
                        !applied
                            || formatting_call_at(tokens, i, code)
                            || encoding_call_at(tokens, i, code)
                    }
                    // a list whose items a formatting call joins (`"".join([`, `[...].join(`),
                    // or that is the value (`parts = [...]`, later `"".join(parts)`)
                    "[" => {
                        !applied
                            && (self.brackets.is_empty()
                                || i.checked_sub(1).is_some_and(|p| text(&tokens[p]) == "(")
                                    && self.brackets.last() == Some(&true)
                                || closes.get(i).is_some_and(|&close| {
                                    // an unclosed `[` has no close (usize::MAX)
                                    close.checked_add(3).is_some_and(|after| {
                                        formatting_call_at(tokens, after, code)
                                    })
                                }))
                    }
                    // a map read where it stands (`{"k": "..."}["k"]`, `{k: "..."}.k`): the
                    // value read is a piece, whichever it is
                    _ => {
                        !applied
                            && closes.get(i).is_some_and(|&close| {
                                tokens
                                    .get(close.saturating_add(1))
                                    .is_some_and(|next| matches!(text(next), "[" | "."))
                            })
                    }
                };
                self.calls += usize::from(!joins);
                self.brackets.push(joins);
                false
            }
            ")" | "]" | "}" => {
                if self.brackets.pop() == Some(false) {
                    self.calls -= 1;
                }
                false
            }
            _ => self.calls == 0,
        }
    }
}

/// How many tokens `named_by_sibling` reads back to a call's `(`.
const ARGUMENTS_READ_BACK: usize = 64;

/// Whether the string at token `i` is named a credential by what is written before it, as the
/// parsed path's `named_credential` reads a sibling (docs/normalization.md, Secrets): the
/// argument after a string argument naming one (`os.Setenv("API_KEY", "...")`,
/// `props.setProperty("password", "...")`, `req.Header.Set("Authorization", "...")`), the
/// argument at the position a function takes a password by (`secrets::PASSWORD_ARGUMENTS`:
/// `DriverManager.getConnection(url, "bob", "...")`, `new PDO(dsn, "bob", "...")`), or a
/// string right after a word naming one or after SQL's `IDENTIFIED BY` (`CREATE USER bob WITH
/// PASSWORD '...'`, `ALTER USER bob IDENTIFIED BY '...'`, Ruby's `password "..."`). Reads at
/// most `ARGUMENTS_READ_BACK` tokens.
fn named_by_sibling(tokens: &[Token], i: usize, code: &str, style: &Style) -> bool {
    let text = |t: &Token| &code[t.start..t.end];
    let prev = |back: usize| i.checked_sub(back).and_then(|j| tokens.get(j));
    let names = |name: &str| {
        name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && super::naming::upper_snake(name).is_some_and(|n| super::secrets::is_secret_name(&n))
    };
    match prev(1) {
        Some(word) if word.kind == Kind::Word => {
            return names(text(word))
                || (text(word).eq_ignore_ascii_case("BY")
                    && prev(2).is_some_and(|w| text(w).eq_ignore_ascii_case("IDENTIFIED")));
        }
        Some(comma) if text(comma) == "," => {
            let after_name = prev(2).is_some_and(|s| {
                s.kind == Kind::Str
                    && prev(3).is_some_and(|o| matches!(text(o), "(" | ","))
                    && decode_string(text(s), style).is_some_and(|n| names(&n))
            });
            if after_name {
                return true;
            }
        }
        Some(open) if text(open) == "(" => {}
        _ => return false,
    }
    // the argument's index among its call's, and the call's name
    let (mut index, mut depth) = (0usize, 0usize);
    for back in 1..=ARGUMENTS_READ_BACK {
        let Some(t) = prev(back) else { return false };
        match text(t) {
            ")" | "]" | "}" => depth += 1,
            "(" | "[" | "{" if depth > 0 => depth -= 1,
            "(" => {
                return prev(back + 1).is_some_and(|f| {
                    f.kind == Kind::Word && {
                        let function = text(f).rsplit(['.', ':']).next().unwrap_or("");
                        super::secrets::PASSWORD_ARGUMENTS
                            .iter()
                            .any(|&(name, at)| name == function && at == index)
                    }
                });
            }
            "[" | "{" | ";" => return false,
            "," if depth == 0 => index += 1,
            _ => {}
        }
    }
    false
}

/// Whether a value given as a credential starts after token `i`: `i` is `=` (not `==`), `:`
/// or `(` after a credential's name (`password=`, `"api_key":`, `set_password(`).
fn names_credential_value(tokens: &[Token], i: usize, code: &str, style: &Style) -> bool {
    let text = |t: &Token| &code[t.start..t.end];
    let t = text(&tokens[i]);
    // not a comparison's `==`
    let compares = t == "=" && tokens.get(i + 1).is_some_and(|n| text(n) == "=");
    matches!(t, "=" | ":" | "(")
        && !compares
        && i + 1 < tokens.len()
        && context_name(tokens, i + 1, code, style)
            .and_then(|name| super::naming::upper_snake(&name))
            .is_some_and(|name| super::secrets::is_secret_name(&name))
}

/// The variable a statement assigns when token `i` is its `=` (`pw = ...`, `const pw = ...`):
/// a name at the start of a statement (after a line break, `;`, a brace, `const`, `let` or
/// `var`), not a keyword argument (`f(pw=...`) nor a comparison. Constant cost.
fn assignment_at<'c>(tokens: &[Token], i: usize, code: &'c str) -> Option<&'c str> {
    let text = |t: &Token| &code[t.start..t.end];
    if text(&tokens[i]) != "=" || tokens.get(i + 1).is_some_and(|n| text(n) == "=") {
        return None;
    }
    let name = &tokens[i.checked_sub(1)?];
    if name.kind != Kind::Word {
        return None;
    }
    let starts = |at: usize| {
        at == 0
            || code.as_bytes()[tokens[at - 1].end..tokens[at].start].contains(&b'\n')
            || matches!(text(&tokens[at - 1]), ";" | "{" | "}")
    };
    let declared = i >= 2 && matches!(text(&tokens[i - 2]), "const" | "let" | "var");
    (starts(i - 1) || declared && starts(i - 2)).then(|| text(name))
}

/// The names an interpolated string token `i` reads: the identifiers in the `{...}` of a
/// Python f-string (`f"{pw}..."`: its prefix is the word before it) or the `${...}` of a JS
/// template string, not after a `.` (`{a.b}` reads `a`). Linear in the string.
fn interpolated_names<'c>(
    tokens: &[Token],
    i: usize,
    code: &'c str,
    style: &Style,
) -> Vec<&'c str> {
    let token = &tokens[i];
    let raw = &code[token.start..token.end];
    let formatted = if style.python {
        i.checked_sub(1).map(|p| &tokens[p]).is_some_and(|p| {
            p.kind == Kind::Word
                && p.end == token.start
                && p.end - p.start <= 2
                && code[p.start..p.end].contains(['f', 'F'])
        })
    } else {
        raw.starts_with('`')
    };
    if !formatted {
        return Vec::new();
    }
    let bytes = raw.as_bytes();
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut at = 0usize;
    while at < bytes.len() {
        let b = bytes[at];
        let opens = if style.python {
            b == b'{' && bytes.get(at + 1) != Some(&b'{')
        } else {
            b == b'{' && at > 0 && bytes[at - 1] == b'$'
        };
        if b == b'{' && style.python && bytes.get(at + 1) == Some(&b'{') && depth == 0 {
            at += 2; // `{{` is a brace written, not an interpolation
            continue;
        }
        if opens || (depth > 0 && b == b'{') {
            depth += 1;
        } else if b == b'}' && depth > 0 {
            depth -= 1;
        } else if depth > 0 && (b.is_ascii_alphabetic() || b == b'_' || b == b'$') {
            let start = at;
            while at < bytes.len()
                && (bytes[at].is_ascii_alphanumeric() || matches!(bytes[at], b'_' | b'$'))
            {
                at += 1;
            }
            if start == 0 || bytes[start - 1] != b'.' {
                names.push(&raw[start..at]);
            }
            continue;
        }
        at += 1;
    }
    names
}

/// Methods that build a string of their receiver and arguments: `"...{}".format(x)`,
/// `"".join([...])`, `"...".concat(x)`, `[...].join("")`, `fmt.replace("{}", x)`.
const FORMATTING_METHODS: &[&str] = &["format", "join", "concat", "replace"];

/// Whether token `paren` is the `(` of a formatting call (`.format(`, `.join(`...;
/// `FORMATTING_METHODS`). Constant cost.
fn formatting_call_at(tokens: &[Token], paren: usize, code: &str) -> bool {
    let text = |i: usize| tokens.get(i).map(|t| &code[t.start..t.end]);
    paren >= 2
        && text(paren) == Some("(")
        && text(paren - 2) == Some(".")
        && text(paren - 1).is_some_and(|m| FORMATTING_METHODS.contains(&m))
}

/// Whether token `paren` is the `(` of a call that encodes its argument into its value
/// (`str(`, `b64encode(`, `btoa(`, `Buffer.from(`; as the parsed path's `encoding_call`).
/// Constant cost.
fn encoding_call_at(tokens: &[Token], paren: usize, code: &str) -> bool {
    let text = |i: usize| tokens.get(i).map(|t| &code[t.start..t.end]);
    let Some(callee) = paren.checked_sub(1).and_then(text) else {
        return false;
    };
    let method = paren >= 2 && text(paren - 2) == Some(".");
    match callee {
        "str" | "bytes" | "btoa" | "encodeURIComponent" => !method,
        "b64encode" | "urlsafe_b64encode" | "standard_b64encode" => true,
        "from" => method && paren >= 3 && text(paren - 3) == Some("Buffer"),
        _ => false,
    }
}

/// For each token, the index of the bracket that closes it when it opens one (`(`, `[`,
/// `{`), else `usize::MAX`; one pass.
fn closing_brackets(tokens: &[Token], code: &str) -> Vec<usize> {
    let mut closes = vec![usize::MAX; tokens.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        match &code[token.start..token.end] {
            "(" | "[" | "{" => open.push(i),
            ")" | "]" | "}" => {
                if let Some(at) = open.pop() {
                    closes[at] = i;
                }
            }
            _ => {}
        }
    }
    closes
}

/// Whether a string is a command line that writes a credential as a shell does (`"sshpass -p
/// pw ssh h"`, `"curl -u bob:pw ..."`): code runs such strings (`subprocess.run`, `execSync`),
/// so the string is a secret value (docs/normalization.md, Secrets). Linear in the string.
pub(super) fn holds_shell_secret(value: &str) -> bool {
    // every shape names its credential with a flag or an assignment
    if !value.contains(['-', '=']) {
        return false;
    }
    let tokens = lex(value, &style(None));
    shell_secret_values(&tokens, value).iter().any(|s| s.secret)
        || !stdin_passwords(&tokens, value, false).is_empty()
}

/// The most items of a list `argv_secret_items` reads: an argv written out in code is short.
pub(super) const MAX_ARGV_ITEMS: usize = 256;

/// Which items of a literal list used as an argv (`subprocess.run(["mysql", "-pX", db])`,
/// `spawn("sshpass", ["-p", "X", "ssh", h])`, the command first) hold a credential by the
/// rules a shell command line is read by (`shell_secret_values`), each item one word: the
/// decoded value of a string literal, `None` for any other item (a name, a call: computed,
/// so no credential of its own). A word's blanks, quotes and shell operators are read as
/// plain letters, so an item stays one word whatever it holds. Linear in the items' text
/// (docs/normalization.md, Secrets).
pub(super) fn argv_secret_items(items: &[Option<&str>]) -> Vec<bool> {
    let mut line = String::new();
    let mut spans = Vec::with_capacity(items.len());
    for item in items {
        if !line.is_empty() {
            line.push(' ');
        }
        let start = line.len();
        match item {
            Some(word) if !word.is_empty() => line.extend(word.chars().map(|c| {
                let operator = matches!(
                    c,
                    ';' | '&' | '|' | '(' | ')' | '<' | '>' | '\'' | '"' | '`' | '$' | '#' | '\\'
                );
                if c.is_whitespace() || operator {
                    '_'
                } else {
                    c
                }
            })),
            Some(_) => line.push('_'),
            None => line.push_str("$_"),
        }
        spans.push((start, line.len()));
    }
    let tokens = lex(&line, &style(None));
    let secrets: Vec<(usize, usize)> = shell_secret_values(&tokens, &line)
        .into_iter()
        .filter(|s| s.secret)
        .map(|s| (s.start, s.end))
        .collect();
    spans
        .iter()
        .zip(items)
        .map(|(&(start, end), item)| {
            item.is_some() && secrets.iter().any(|&(s, e)| s < end && start < e)
        })
        .collect()
}

/// The byte ranges of the credentials free text writes as a shell writes them, in order and
/// apart: a command line quoted in an argument's value or a tool's error (`mysql -u bob
/// -pSECRET db`, `curl -u bob:SECRET https://h`, `sshpass -p SECRET ssh h`, `--password
/// SECRET`, `echo SECRET | docker login --password-stdin`), read by the shell rules code is
/// read by (`shell_secret_values`, `stdin_passwords`); a quoted value's range is inside its
/// quotes. Free text has no comments and no backquoted strings (a `#` or a `//` is prose, a
/// backquote marks code in Markdown), and a command starts after `: ` and at a backquote too.
/// Linear in the text (docs/normalization.md, Secrets).
pub(super) fn shell_secret_ranges(text: &str) -> Vec<(usize, usize)> {
    if !text.contains(['-', '=']) && !text.contains(" set ") {
        return Vec::new();
    }
    let prose = Style {
        hash_comments: false,
        slash_comments: false,
        backticks: false,
        python: false,
    };
    // A command also starts after a `: ` of prose (`failed: echo ... | docker login`), inside
    // backquotes (Markdown's code) and inside a JSON string (`{"cmd": "sshpass -p ... ssh
    // h"}`, a tool's arguments): each such `:`, backquote and JSON string's quote is read as
    // a `;`, byte for byte, so the ranges found are the text's.
    let raw = text.as_bytes();
    let json_quote = |i: usize| {
        let before = raw[..i].trim_ascii_end();
        let after = raw[i + 1..].trim_ascii_start();
        (i == 0 || raw[i - 1] != b'\\')
            && (matches!(before.last(), Some(b':' | b'[' | b',' | b'{'))
                || matches!(after.first(), None | Some(b':' | b',' | b'}' | b']')))
    };
    let bounded: Vec<u8> = text
        .bytes()
        .enumerate()
        .map(|(i, b)| {
            if b == b'"' && json_quote(i) {
                return b';';
            }
            let colon = b == b':'
                && text
                    .as_bytes()
                    .get(i + 1)
                    .is_some_and(|n| matches!(n, b' ' | b'\t'));
            if colon || b == b'`' {
                b';'
            } else {
                b
            }
        })
        .collect();
    // Only ASCII bytes were replaced by ASCII: still UTF-8.
    let Ok(commands) = String::from_utf8(bounded) else {
        return Vec::new();
    };
    let tokens = lex(&commands, &prose);
    let text = commands.as_str();
    let bytes = text.as_bytes();
    let mut found: Vec<(usize, usize)> = shell_secret_values(&tokens, text)
        .into_iter()
        .filter(|s| s.secret)
        .chain(stdin_passwords(&tokens, text, true))
        .map(|s| {
            let quoted = s.end - s.start >= 2
                && matches!(bytes[s.start], b'"' | b'\'')
                && bytes[s.end - 1] == bytes[s.start];
            // a user before its password stays (`curl -u bob:[REDACTED]`)
            if quoted {
                (s.start + s.user_len.max(1), s.end - 1)
            } else {
                (s.start + s.user_len, s.end)
            }
        })
        .filter(|(start, end)| end > start)
        .collect();
    found.sort_unstable();
    let mut end = 0;
    found.retain(|&(s, e)| {
        let apart = s >= end;
        end = end.max(e);
        apart
    });
    found
}

/// Whether a flag as written (`--password-stdin`, `--token-stdin=true`) makes a command read a
/// credential from its standard input: `docker`, `podman`, `helm registry`, `oras`, `skopeo`
/// and `buildah login --password-stdin`, `gh auth login --with-token`, any credential's flag
/// ending in `-stdin` (`takes_no_value`).
fn reads_credential_from_stdin(flag: &str) -> bool {
    let name = flag.split('=').next().unwrap_or(flag);
    let bare = name.trim_start_matches('-');
    bare.len() < name.len()
        && super::naming::upper_snake(bare).is_some_and(|upper| {
            super::secrets::is_secret_name(&upper)
                && (upper == "WITH_TOKEN" || upper.ends_with("_STDIN"))
        })
}

/// Whether a flag named as a credential (its name in UPPER_SNAKE, dashes dropped) takes no
/// value, so that the word after it is no credential: it reads one from the standard input
/// (`--password-stdin`, `--token-stdin`, `--with-token`; the word after it is a registry or a
/// host) or says there is none or where to ask for one (`--no-password`, `--ask-password`,
/// `--password-prompt`).
fn takes_no_value(upper: &str) -> bool {
    upper == "WITH_TOKEN"
        || ["_STDIN", "_PROMPT"].iter().any(|end| upper.ends_with(end))
        || ["NO_", "ASK_"].iter().any(|start| upper.starts_with(start))
}

/// Commands that write their arguments to their output.
const ECHO_COMMANDS: &[&str] = &["echo", "printf"];

/// The passwords written by `echo` or `printf` into a pipe, or given by a here-string (`<<<
/// pw`), to a command that reads one from its input (`reads_credential_from_stdin`): `echo pw
/// | docker login -u bob --password-stdin`, `gh auth login --with-token <<< pw`,
/// `printf '%s' pw | helm registry login r --password-stdin`, named `password`. Every word
/// after `echo`, every one after `printf`'s format (its format when it has no other); a flag
/// (`-n`) and a computed value (`$PW`, `"$PW"`, `$(...)`, a backquote) are none. A command runs
/// to `;`, `&`, `|`, a parenthesis or a line's end (not one escaped by `\`); one pass over the
/// tokens (docs/normalization.md, Secrets). In `prose` (free text), an echo starts a command
/// after any word too.
fn stdin_passwords(tokens: &[Token], code: &str, prose: bool) -> Vec<ShellSecret> {
    let bytes = code.as_bytes();
    let text = |t: &Token| &code[t.start..t.end];
    let mut found = Vec::new();
    // the words written by the command piped into the current one, if it is an echo
    let mut written: Vec<ShellSecret> = Vec::new();
    // the current command: its echo's words so far (None when it is no echo), and whether it
    // is printf, reads a password from its input, and was piped into by an echo
    let mut words: Option<Vec<ShellSecret>> = None;
    // the word a here-string (`<<< pw`) gives the current command's input
    let mut here: Vec<ShellSecret> = Vec::new();
    let (mut printf, mut reads_password, mut command_start) = (false, false, true);
    let mut end_command = |words: &mut Option<Vec<ShellSecret>>,
                           written: &mut Vec<ShellSecret>,
                           here: &mut Vec<ShellSecret>,
                           printf: bool,
                           reads_password: bool,
                           piped: bool| {
        if reads_password {
            found.append(written);
            found.append(here);
        }
        written.clear();
        here.clear();
        if let (true, Some(mut words)) = (piped, words.take()) {
            if printf && words.len() > 1 {
                words.remove(0); // the format
            }
            *written = words;
        }
        *words = None;
    };
    for (i, token) in tokens.iter().enumerate() {
        let gap = i.checked_sub(1).map(|p| &bytes[tokens[p].end..token.start]);
        let escaped = i > 0 && text(&tokens[i - 1]) == "\\";
        if gap.is_some_and(|g| g.contains(&b'\n')) && !escaped {
            end_command(
                &mut words,
                &mut written,
                &mut here,
                printf,
                reads_password,
                false,
            );
            (reads_password, command_start) = (false, true);
        }
        let t = text(token);
        if matches!(t, ";" | "&" | "|" | "(" | ")") {
            // `a | b` pipes; `a || b` does not
            let pipe = t == "|"
                && !tokens.get(i + 1).is_some_and(|n| text(n) == "|")
                && !(i > 0 && text(&tokens[i - 1]) == "|");
            end_command(
                &mut words,
                &mut written,
                &mut here,
                printf,
                reads_password,
                pipe,
            );
            (reads_password, command_start) = (false, true);
            continue;
        }
        let word_start = token.start == 0 || bytes[token.start - 1].is_ascii_whitespace();
        // in prose an echo may follow any word (`tried echo ... | docker login ...`)
        let prose_echo = prose
            && word_start
            && token.kind == Kind::Word
            && ECHO_COMMANDS.iter().any(|e| t.eq_ignore_ascii_case(e));
        if command_start || prose_echo {
            command_start = false;
            let name = t.to_ascii_lowercase();
            printf = name == "printf";
            words =
                (token.kind == Kind::Word && ECHO_COMMANDS.contains(&name.as_str())).then(Vec::new);
            continue;
        }
        if t != "<" && bytes[..token.start].trim_ascii_end().ends_with(b"<<<") {
            // `gh auth login --with-token <<< pw`: the word is the command's input
            if let Some(end) = shell_value_end(Some(token), bytes, token.start) {
                here.push(ShellSecret {
                    start: token.start,
                    end,
                    name: "password".to_owned(),
                    named: true,
                    secret: true,
                    user_len: 0,
                });
            }
            continue;
        }
        if !word_start {
            continue;
        }
        if t == "-" {
            let end = word_end(bytes, token.start, |b| {
                matches!(b, b';' | b'&' | b'|' | b'(' | b')')
            });
            reads_password |= reads_credential_from_stdin(&code[token.start..end]);
        }
        let Some(words) = words.as_mut() else {
            continue;
        };
        let Some(end) = shell_value_end(Some(token), bytes, token.start) else {
            continue;
        };
        let inner = code[token.start..end].trim_start_matches(['"', '\'']);
        if !inner.starts_with(['$', '`']) {
            words.push(ShellSecret {
                start: token.start,
                end,
                name: "password".to_owned(),
                named: true,
                secret: true,
                user_len: 0,
            });
        }
    }
    end_command(
        &mut words,
        &mut written,
        &mut here,
        printf,
        reads_password,
        false,
    );
    found
}

/// A credential's value in shell-like code: its byte range (a quoted value with its quotes)
/// and the name that says it is one; or, not `secret`, a credential's path (`--password-file
/// PATH`, `named`) or the word after a credential's flag that takes no value (`takes_no_value`,
/// not `named`).
struct ShellSecret {
    start: usize,
    end: usize,
    name: String,
    named: bool,
    secret: bool,
    /// the bytes at the value's start that are no secret: a user and its `:` before a
    /// password (`bob:` of `curl -u bob:pw`), kept in free text (`shell_secret_ranges`); in
    /// code the value is one parameter, user and all
    user_len: usize,
}

/// The longest name (with its dashes) read before `=` or a value: a credential's name is short,
/// and the bound keeps the scan linear.
const MAX_SHELL_NAME: usize = 64;

/// The values of credentials written as a shell writes them, in order: an assignment or a
/// flag's `NAME=value` (`PGPASSWORD=pw ./run`, `export API_TOKEN=pw`, `--api-key=pw`), a flag
/// followed by its value (`--password pw`, `--token "pw"`), and a user with a password after
/// `-u` or `--user` of a command that takes them so (`USER_PASSWORD_COMMANDS`: `curl -u
/// bob:pw`), where the name is a credential's (`is_secret_name`). A value that starts with
/// `$`, `(` or a backquote is computed, not written, and is left. The word after a flag
/// that takes no value (`takes_no_value`: `--password-stdin quay.io`) is listed too, not
/// secret: such a word was read as a credential's value before, and stays a parameter, so
/// the code hashes as it did (docs/normalization.md, Secrets).
fn shell_secret_values(tokens: &[Token], code: &str) -> Vec<ShellSecret> {
    let bytes = code.as_bytes();
    let mut found: Vec<ShellSecret> = Vec::new();
    // whether the current command (to `;`, `&`, `|`, a parenthesis or a line's end) has named
    // one of `USER_PASSWORD_COMMANDS`, as `command_passwords` reads commands; and its name
    // (past assignments and wrappers: `CommandName`), whether one of
    // `PROMPTING_PASSWORD_COMMANDS`
    let mut user_command = false;
    let mut command = CommandName::default();
    let starts = |word: &str, name: &str| {
        word.get(..name.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(name))
    };
    for (i, token) in tokens.iter().enumerate() {
        let text = &code[token.start..token.end];
        let line_break = i > 0 && bytes[tokens[i - 1].end..token.start].contains(&b'\n');
        if line_break || matches!(text, ";" | "&" | "|" | "(" | ")") {
            user_command = false;
            command = CommandName::default();
        }
        if token.kind == Kind::Word && !user_command {
            user_command = USER_PASSWORD_COMMANDS.iter().any(|name| starts(text, name));
        }
        command.read(token, bytes);
        let prompting = command.name.is_some_and(|(start, end)| {
            PROMPTING_PASSWORD_COMMANDS
                .iter()
                .any(|name| starts(&code[start..end], name))
        });
        // a YAML mapping's `name: value` (a manifest or a compose file written in a shell's
        // code, `POSTGRES_PASSWORD: ...`): the value after the `:` and a blank
        let mapping = text == ":"
            && tokens.get(i + 1).is_some_and(|next| {
                next.start > token.end
                    && bytes[token.end..next.start]
                        .iter()
                        .all(|&b| b == b' ' || b == b'\t')
            });
        let (name_end, value_at) = if text == "=" {
            (token.start, token.end)
        } else if mapping {
            (token.start, tokens[i + 1].start)
        } else if let Some(next) = tokens.get(i + 1).filter(|next| {
            token.kind == Kind::Word
                && next.start > token.end
                && bytes[token.end..next.start]
                    .iter()
                    .all(|&b| b == b' ' || b == b'\t')
        }) {
            (token.end, next.start)
        } else {
            continue;
        };
        let Some(name) = shell_name_before(bytes, name_end) else {
            continue;
        };
        // a mapping's name starts its line (past blanks and a list item's `- `): `grep
        // token: file` is a command's words
        let line_start = || {
            bytes[..name_end - name.len()]
                .iter()
                .rev()
                .take_while(|&&b| b != b'\n')
                .all(|&b| matches!(b, b' ' | b'\t' | b'-'))
        };
        if mapping && !line_start() {
            continue;
        }
        let flag = name.trim_start_matches('-');
        if text != "=" && !mapping && (flag.len() == name.len() || flag.is_empty()) {
            continue; // a value after a space belongs to a flag (`--token pw`), not a word
        }
        let Some(upper) = super::naming::upper_snake(flag) else {
            continue;
        };
        let user = user_command && matches!(flag, "u" | "user");
        if !user && !super::secrets::names_a_credential(&upper) {
            continue;
        }
        if found.last().is_some_and(|s| s.end > value_at) {
            continue; // inside the value before (`--token=a=b`)
        }
        let Some(end) = shell_value_end(tokens.get(i + 1), bytes, value_at) else {
            continue;
        };
        // `-u name` alone is a user, no password (curl asks for one); `-u name:pw` gives
        // the password after the user's first `:`
        let user_len = match code[value_at..end].find(':') {
            Some(colon) if user => colon + 1,
            None if user => continue,
            _ => 0,
        };
        // a credential's path (`--password-file PATH`) is a parameter named as any other
        // value; the word after a flag that takes no value is one, unnamed (`$STR`)
        let path = super::secrets::names_a_path(&upper)
            || super::secrets::is_path_value(&upper, &bytes[value_at..end]);
        let no_value = flag.len() < name.len()
            && (takes_no_value(&upper) || (prompting && text != "=" && upper == "PASSWORD"));
        found.push(ShellSecret {
            start: value_at,
            end,
            name: if user {
                "user".to_owned()
            } else {
                flag.to_owned()
            },
            named: user || !no_value,
            secret: user || !(path || no_value),
            user_len,
        });
    }
    let mut attached = command_passwords(tokens, code);
    attached.extend(positional_passwords(tokens, code));
    if !attached.is_empty() {
        found.extend(attached);
        found.sort_by_key(|s| s.start);
        let mut end = 0;
        found.retain(|s| {
            let apart = s.start >= end;
            end = end.max(s.end);
            apart
        });
    }
    found
}

/// Commands that run the command written after them, with their own flags before it (`sudo
/// -u postgres psql`, `env X=1 psql`, `nice -n 5 psql`, `timeout 30 psql`): each one's name,
/// its short flags that take the next word as their value (a value may be attached:
/// `-upostgres`), its long ones (`--user postgres`; `--user=postgres` is one word), and how
/// many words it takes before the command (`timeout`'s duration). A flag misread either way
/// only makes a later word the command's name, which at worst redacts the word after
/// `--password` (docs/normalization.md, Secrets).
const COMMAND_WRAPPERS: &[(&str, &str, &[&str], usize)] = &[
    (
        "sudo",
        "CDghpRrTtUu",
        &[
            "chdir",
            "chroot",
            "close-from",
            "command-timeout",
            "group",
            "host",
            "other-user",
            "prompt",
            "role",
            "type",
            "user",
        ],
        0,
    ),
    ("doas", "Cu", &[], 0),
    ("env", "Cu", &["chdir", "unset"], 0),
    ("time", "fo", &["format", "output"], 0),
    ("nice", "n", &["adjustment"], 0),
    ("ionice", "cnp", &["class", "classdata", "pid"], 0),
    ("stdbuf", "eio", &["error", "input", "output"], 0),
    ("nohup", "", &[], 0),
    ("exec", "a", &[], 0),
    ("command", "", &[], 0),
    ("builtin", "", &[], 0),
    (
        "xargs",
        "adEILnPs",
        &[
            "arg-file",
            "delimiter",
            "eof",
            "max-args",
            "max-chars",
            "max-lines",
            "max-procs",
            "process-slot-var",
            "replace",
        ],
        0,
    ),
    ("timeout", "ks", &["kill-after", "signal"], 1),
];

/// The name of a shell command, read one word at a time: its first word that is no
/// assignment (`PGPASSWORD=pw psql`) and no wrapper's (`COMMAND_WRAPPERS`: `sudo -u postgres
/// psql`), as written, path and all, its byte range cut to the part after the last `/`
/// (`/usr/bin/psql`). A word runs to a space or one of `;&|()<>`; each byte is read once.
#[derive(Default)]
struct CommandName {
    /// the name's byte range, once read
    name: Option<(usize, usize)>,
    /// the wrapper the words so far are under (an index into `COMMAND_WRAPPERS`)
    wrapper: Option<usize>,
    /// whether the next word is the value of a wrapper's flag
    flag_value: bool,
    /// the wrapper's words still to come before the command
    skip: usize,
    /// the end of the last word read
    read_to: usize,
}

impl CommandName {
    fn read(&mut self, token: &Token, bytes: &[u8]) {
        if self.name.is_some() || token.kind == Kind::Punct || token.start < self.read_to {
            return;
        }
        let apart = |b: u8| {
            b.is_ascii_whitespace() || matches!(b, b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>')
        };
        let start = bytes[..token.start]
            .iter()
            .rposition(|&b| apart(b))
            .map_or(0, |at| at + 1);
        let end = bytes[token.end..]
            .iter()
            .position(|&b| apart(b))
            .map_or(bytes.len(), |n| token.end + n);
        self.read_to = end;
        let word = &bytes[start..end];
        let assigns = word.iter().position(|&b| b == b'=').is_some_and(|eq| {
            eq > 0
                && !word[0].is_ascii_digit()
                && word[..eq]
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if assigns {
            return;
        }
        if let Some(wrapper) = self.wrapper.map(|w| COMMAND_WRAPPERS[w]) {
            if let Some(flag) = word.strip_prefix(b"-") {
                self.flag_value = Self::takes_next_word(flag, wrapper.1, wrapper.2);
                return;
            }
            if self.flag_value {
                self.flag_value = false;
                return;
            }
            if self.skip > 0 {
                self.skip -= 1;
                return;
            }
        }
        let base = word
            .iter()
            .rposition(|&b| b == b'/')
            .map_or(start, |at| start + at + 1);
        match COMMAND_WRAPPERS
            .iter()
            .position(|w| w.0.as_bytes() == &bytes[base..end])
        {
            Some(wrapper) => {
                self.wrapper = Some(wrapper);
                self.skip = COMMAND_WRAPPERS[wrapper].3;
            }
            None => self.name = Some((base, end)),
        }
    }

    /// Whether a wrapper's flag as written (without its first `-`) takes the next word as its
    /// value: a long one named so, with no `=`, or a cluster of short ones whose first that
    /// takes a value is its last letter (`-Eu postgres`, not `-upostgres`).
    fn takes_next_word(flag: &[u8], short: &str, long: &[&str]) -> bool {
        match flag.strip_prefix(b"-") {
            Some(long_flag) => long.iter().any(|name| name.as_bytes() == long_flag),
            None => flag
                .iter()
                .position(|&b| short.as_bytes().contains(&b))
                .is_some_and(|at| at + 1 == flag.len()),
        }
    }
}

/// Commands whose `--password` written alone (not `--password=pw`) takes no value but asks
/// for the password (a word each command's name starts with: PostgreSQL's clients, whose
/// `--password` is a switch, `pg_dumpall` too; MySQL's and MariaDB's, whose `--password` takes
/// one only after `=`, `mysqldump` and `mariadb-dump` too): the word after it (`psql --password
/// mydb`, the database) is no credential. Only the command's name counts (`./run --db psql
/// --password pw` gives one).
const PROMPTING_PASSWORD_COMMANDS: &[&str] = &[
    "psql",
    "pg_dump",
    "pg_restore",
    "pg_basebackup",
    "createdb",
    "createuser",
    "dropdb",
    "dropuser",
    "vacuumdb",
    "reindexdb",
    "clusterdb",
    "mysql",
    "mariadb",
];

/// Commands whose `-u`/`--user` takes `user:password` (curl's `-u bob:pw`, wget's
/// `--user=bob:pw`); any other command's is a user alone or a uid:gid (`docker run -u
/// 1000:1000`, `sudo -u bob`).
const USER_PASSWORD_COMMANDS: &[&str] = &["curl", "wget"];

/// Commands whose one-letter flag takes a password (`mysql -pSECRET`, `sshpass -p SECRET`):
/// the command (a word it starts with: `mysqldump`, `mariadb-dump` and `mongosh` too), the
/// word that must follow it ("" for none: `docker login`, not `docker run -p 8080:80`), the
/// flag's letter, and whether the value may follow after a space (mysql's `-p` alone prompts,
/// and the word after it is the database).
const PASSWORD_FLAGS: &[(&str, &str, char, bool)] = &[
    ("mysql", "", 'p', false),
    ("mariadb", "", 'p', false),
    ("sshpass", "", 'p', true),
    ("mongo", "", 'p', true),
    ("redis", "", 'a', true),
    ("docker", "login", 'p', true),
    ("podman", "login", 'p', true),
    // `openssl enc -k pw`: only the flag alone (`-kfile path` names a file)
    ("openssl", "", 'k', true),
];

/// The passwords given to such a flag (`PASSWORD_FLAGS`), attached (`-pSECRET`, `-p'pw'`) or,
/// where the command takes it so, after a space (`-p SECRET`), named `password`; the flag of
/// any other command (`mkdir -p`, `ssh -p 22`) is none. A command runs to `;`, `&`, `|`, a
/// parenthesis or a line's end; one pass over the tokens.
fn command_passwords(tokens: &[Token], code: &str) -> Vec<ShellSecret> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    // the entries of `PASSWORD_FLAGS` whose command the current one is, and whether each
    // has had its following word
    let mut command: Vec<(usize, bool)> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let text = &code[token.start..token.end];
        let line_break = i > 0 && bytes[tokens[i - 1].end..token.start].contains(&b'\n');
        if line_break || matches!(text, ";" | "&" | "|" | "(" | ")") {
            command.clear();
        }
        if token.kind == Kind::Word {
            // a command's name, not an assignment's (`MYSQL_HOST=db psql -p5432`)
            let assigned = tokens
                .get(i + 1)
                .is_some_and(|n| n.start == token.end && &code[n.start..n.end] == "=");
            let lower = text.to_ascii_lowercase();
            for (entry, &(name, then, _, _)) in PASSWORD_FLAGS.iter().enumerate() {
                if !assigned && lower.starts_with(name) {
                    command.push((entry, then.is_empty()));
                } else if then == lower {
                    for (e, ready) in command.iter_mut() {
                        *ready |= *e == entry;
                    }
                }
            }
            continue;
        }
        // a flag at a word's start: `-`, then its letter and maybe the value, in one word
        let word_start = token.start == 0 || matches!(bytes[token.start - 1], b' ' | b'\t');
        let Some(letter) = tokens.get(i + 1) else {
            continue;
        };
        if command.is_empty() || text != "-" || !word_start || letter.start != token.end {
            continue;
        }
        let flagged = &code[letter.start..letter.end];
        let Some(&(entry, _)) = command.iter().find(|&&(entry, ready)| {
            let (name, _, flag, _) = PASSWORD_FLAGS[entry];
            // openssl's flags are words (`-kfile`, `-keyform`): its `-k` is the flag alone
            let whole = name != "openssl" || flagged.len() == flag.len_utf8();
            ready && letter.kind == Kind::Word && flagged.starts_with(flag) && whole
        }) else {
            continue;
        };
        let at = letter.start + 1;
        let next = tokens.get(i + 2);
        let value = if letter.end > at || next.is_some_and(|n| n.start == at) {
            Some((at, next.filter(|n| n.start == at)))
        } else {
            // `-p SECRET`: the next word, where the command takes its value so
            next.filter(|n| {
                PASSWORD_FLAGS[entry].3
                    && n.start > at
                    && bytes[at..n.start].iter().all(|&b| b == b' ' || b == b'\t')
            })
            .map(|n| (n.start, Some(n)))
        };
        if let Some((at, quoted)) = value {
            if let Some(end) = shell_value_end(quoted, bytes, at) {
                found.push(ShellSecret {
                    start: at,
                    end,
                    name: "password".to_owned(),
                    named: true,
                    secret: true,
                    user_len: 0,
                });
            }
        }
    }
    found
}

/// The passwords commands take as a positional word, named `password`: the value after a
/// `config` or `configure` command's `set` and a key that names a credential (`aws configure
/// set aws_secret_access_key pw`, `npm config set _authToken pw`), and `htpasswd`'s password
/// in batch mode (`-b`: `htpasswd -b file user pw`, `htpasswd -nb user pw`). A command runs to
/// `;`, `&`, `|`, a parenthesis or a line's end; one pass over the tokens
/// (docs/normalization.md, Secrets).
fn positional_passwords(tokens: &[Token], code: &str) -> Vec<ShellSecret> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    // the tokens that start the current command's words
    let mut words: Vec<usize> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let text = &code[token.start..token.end];
        let line_break = i > 0 && bytes[tokens[i - 1].end..token.start].contains(&b'\n');
        if line_break || matches!(text, ";" | "&" | "|" | "(" | ")") {
            positional_in(&words, tokens, code, &mut found);
            words.clear();
            if !line_break {
                continue;
            }
        }
        if token.start == 0 || bytes[token.start - 1].is_ascii_whitespace() || words.is_empty() {
            words.push(i);
        }
    }
    positional_in(&words, tokens, code, &mut found);
    found
}

/// `positional_passwords` of one command, whose words start at `words`.
fn positional_in(words: &[usize], tokens: &[Token], code: &str, found: &mut Vec<ShellSecret>) {
    let bytes = code.as_bytes();
    let word = |k: usize| {
        let start = tokens[words[k]].start;
        &code[start..word_end(bytes, start, |b| {
            matches!(b, b';' | b'&' | b'|' | b'(' | b')')
        })]
    };
    let mut password_at = |k: usize| {
        let token = &tokens[words[k]];
        if let Some(end) = shell_value_end(Some(token), bytes, token.start) {
            found.push(ShellSecret {
                start: token.start,
                end,
                name: "password".to_owned(),
                named: true,
                secret: true,
                user_len: 0,
            });
        }
    };
    let Some(first) = words.first().map(|_| word(0)) else {
        return;
    };
    let command = first.rsplit('/').next().unwrap_or(first);
    if command == "htpasswd" {
        let flags: Vec<&str> = (1..words.len())
            .map(word)
            .filter(|w| w.starts_with('-'))
            .collect();
        if flags
            .iter()
            .any(|f| !f.starts_with("--") && f.contains('b'))
        {
            let display = flags
                .iter()
                .any(|f| !f.starts_with("--") && f.contains('n'));
            let positional: Vec<usize> = (1..words.len())
                .filter(|&k| !word(k).starts_with('-'))
                .collect();
            if let Some(&k) = positional.get(if display { 1 } else { 2 }) {
                password_at(k);
            }
        }
        return;
    }
    let configures = (0..words.len()).find(|&k| matches!(word(k), "config" | "configure"));
    if let Some(at) = configures {
        if let Some(set) = (at + 1..words.len()).find(|&k| word(k) == "set") {
            let named = set + 2 < words.len()
                && super::naming::upper_snake(word(set + 1))
                    .is_some_and(|n| super::secrets::is_secret_name(&n));
            if named {
                password_at(set + 2);
            }
        }
    }
}

/// The run of `[A-Za-z0-9_.-]` ending at `end`, at most `MAX_SHELL_NAME` long and at the start
/// of a shell word (after a space, the start, or `;&|(`); None when there is none.
fn shell_name_before(bytes: &[u8], end: usize) -> Option<&str> {
    let mut start = end;
    while start > 0 && is_name_byte(bytes[start - 1]) {
        start -= 1;
        if end - start > MAX_SHELL_NAME {
            return None;
        }
    }
    // or a `NAME=value` given as a flag's value (`--from-literal=password=...`)
    let flag_value = || {
        let mut k = start - 1;
        while k > 0 && is_name_byte(bytes[k - 1]) && start - k <= MAX_SHELL_NAME {
            k -= 1;
        }
        bytes[k] == b'-' && (k == 0 || matches!(bytes[k - 1], b' ' | b'\t' | b'\n'))
    };
    let word_start = start == 0
        || matches!(
            bytes[start - 1],
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'('
        )
        || (bytes[start - 1] == b'=' && flag_value());
    // ASCII by construction.
    (start < end && word_start)
        .then(|| std::str::from_utf8(&bytes[start..end]).ok())
        .flatten()
}

/// The end of the value starting at `at` (where `token` starts when there is one): a quoted
/// string whole, else the shell word up to a space, a quote or one of `;&|<>()`; None when the
/// value is empty or computed (`$VAR`, `$(...)`, a backquote) or a flag (`-x`).
fn shell_value_end(token: Option<&Token>, bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' | b'\'' => {
            let token = token.filter(|t| t.start == at)?;
            (token.kind == Kind::Str).then_some(token.end)
        }
        b'$' | b'(' | b'`' | b'-' => None,
        _ => {
            let end = word_end(bytes, at, |b| {
                matches!(
                    b,
                    b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' | b'"' | b'\'' | b'`'
                )
            });
            (end > at).then_some(end)
        }
    }
}

fn decode_string(raw: &str, style: &Style) -> Option<String> {
    if style.python {
        literal::decode_py_string(raw)
    } else {
        literal::decode_js_string(raw)
    }
}

/// `mcp.a.b(` or `mcp.call("name"`: the tool name, the index of a name string token, and the
/// index of the call's `(`.
fn tool_call_at(
    tokens: &[Token],
    root: usize,
    code: &str,
) -> Option<(String, Option<usize>, usize)> {
    let text = |i: usize| tokens.get(i).map(|t| &code[t.start..t.end]);
    let mut segments: Vec<Cow<'_, str>> = Vec::new();
    let mut i = root + 1;
    loop {
        if text(i) == Some(".") && tokens.get(i + 1).is_some_and(|t| t.kind == Kind::Word) {
            segments.push(Cow::Borrowed(text(i + 1)?));
            i += 2;
        } else if text(i) == Some("[")
            && tokens.get(i + 1).is_some_and(|t| t.kind == Kind::Str)
            && text(i + 2) == Some("]")
        {
            // `mcp["get-weather"](`: a tool whose name is no identifier, as the parsed path
            let raw = text(i + 1)?;
            if raw.starts_with('`') && raw.contains("${") {
                return None; // an interpolated name cannot be read statically
            }
            let name = literal::decode_js_string(raw).or_else(|| literal::decode_py_string(raw))?;
            segments.push(Cow::Owned(name));
            i += 3;
        } else {
            break;
        }
        if segments.len() > MAX_CHAIN {
            return None;
        }
    }
    if text(i) != Some("(") {
        return None;
    }
    let (last, server) = segments.split_last()?;
    if !DISPATCH_METHODS.contains(&last.as_ref()) {
        return Some((segments.join(":"), None, i));
    }
    let (name, name_index) = named_at(tokens, i, code)?;
    let tool = if server.is_empty() {
        name
    } else {
        format!("{}:{name}", server.join(":"))
    };
    Some((tool, Some(name_index), i))
}

/// Tokens `named_at` reads past a call's `(` at most: a name given after a long `arguments`
/// object is not read here (the parsed path reads it), and code nesting tool callers costs a
/// bounded time per call (4 MB of `call_tool(call_tool(...` stays near a plain scan).
const MAX_NAME_SCAN: usize = 64;

/// The tool a dispatch or a tool caller names in its argument list opening at `paren`, as the
/// parsed path reads it (`tree::tool_call`): a string first, else `name: "x"` in an object
/// passed first, else a `name="x"` keyword; with the index of that string token.
fn named_at(tokens: &[Token], paren: usize, code: &str) -> Option<(String, usize)> {
    let text = |i: usize| tokens.get(i).map(|t| &code[t.start..t.end]);
    let is_str = |i: usize| tokens.get(i).is_some_and(|t| t.kind == Kind::Str);
    let decode = |i: usize| {
        let raw = text(i)?;
        if raw.starts_with('`') && raw.contains("${") {
            return None; // an interpolated name cannot be read statically
        }
        literal::decode_js_string(raw).or_else(|| literal::decode_py_string(raw))
    };
    let first = paren + 1;
    if is_str(first) {
        return decode(first).map(|name| (name, first));
    }
    let in_object = text(first) == Some("{");
    let separator = if in_object { ":" } else { "=" };
    let mut depth = 0usize;
    let start = if in_object { first + 1 } else { first };
    let end = tokens.len().min(start + MAX_NAME_SCAN);
    for (j, scanned) in tokens.iter().enumerate().take(end).skip(start) {
        let token = &code[scanned.start..scanned.end];
        match token {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" if depth == 0 => return None,
            ")" | "]" | "}" => depth -= 1,
            _ => {}
        }
        let is_name_key = (scanned.kind == Kind::Word && token == "name")
            || (in_object && is_str(j) && decode(j).as_deref() == Some("name"));
        if depth == 0 && is_name_key && text(j + 1) == Some(separator) && is_str(j + 2) {
            return decode(j + 2).map(|name| (name, j + 2));
        }
    }
    None
}

/// `key: lit`, `key = lit` (not `==`), `"key": lit`, or `callee(lit` (first argument).
fn context_name(tokens: &[Token], i: usize, code: &str, style: &Style) -> Option<String> {
    let text = |t: &Token| &code[t.start..t.end];
    // A Python string's prefix (`f"..."`, `b"..."`, `rb"..."`) is lexed as a word of its own:
    // the string's context is read before it, so `password=f"..."` is named as the parsed
    // path names it (docs/normalization.md, Secrets).
    let prefixed = style.python
        && i.checked_sub(1)
            .and_then(|j| tokens.get(j))
            .is_some_and(|p| {
                p.kind == Kind::Word
                    && p.end == tokens[i].start
                    && p.end - p.start <= 2
                    && text(p).bytes().all(|b| b"bBfFrRuU".contains(&b))
            });
    let i = if prefixed { i - 1 } else { i };
    let prev = |back: usize| i.checked_sub(back).and_then(|j| tokens.get(j));
    let sep = prev(1)?;
    let key = prev(2)?;
    match text(sep) {
        ":" | "=" => {
            if text(sep) == "="
                && prev(3).is_some_and(|t| t.kind == Kind::Punct && "=!<>".contains(text(t)))
            {
                return None;
            }
            match key.kind {
                Kind::Word => Some(text(key).to_owned()),
                Kind::Str => decode_string(text(key), style),
                _ => None,
            }
        }
        "(" if key.kind == Kind::Word => Some(format!("{}_ARG0", text(key))),
        _ => None,
    }
}

fn lex(code: &str, style: &Style) -> Vec<Token> {
    let bytes = code.as_bytes();
    let mut tokens = Vec::new();
    let mut scanned = Scanned::default();
    let mut i = 0usize;
    while i < bytes.len() {
        let c = bytes[i];
        let rest = &bytes[i..];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if (style.hash_comments && c == b'#')
            || (style.slash_comments && rest.starts_with(b"//"))
        {
            i += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        } else if style.slash_comments && rest.starts_with(b"/*") {
            i += rest[2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |p| p + 4);
        } else if c == b'"' || c == b'\'' || (style.backticks && c == b'`') {
            // An unclosed string is one byte of punctuation, and the next quote is read
            // again: `scanned` keeps each string's end found by the scans before, so that each
            // byte is scanned a bounded number of times, not once for each quote before it
            // (docs/normalization.md, Fallback; `Scanned`).
            match string_end(bytes, i, style, &mut scanned).ok() {
                Some(end) => {
                    tokens.push(Token {
                        kind: Kind::Str,
                        start: i,
                        end,
                    });
                    i = end;
                }
                None => {
                    tokens.push(Token {
                        kind: Kind::Punct,
                        start: i,
                        end: i + 1,
                    });
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == b'.' && rest.get(1).is_some_and(u8::is_ascii_digit)) {
            let mut end = i + 1;
            while end < bytes.len() {
                let b = bytes[end];
                let exponent_sign = matches!(b, b'+' | b'-')
                    && matches!(bytes[end - 1], b'e' | b'E')
                    && !code[i..end].starts_with("0x")
                    && !code[i..end].starts_with("0X");
                if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || exponent_sign {
                    end += 1;
                } else {
                    break;
                }
            }
            tokens.push(Token {
                kind: Kind::Number,
                start: i,
                end,
            });
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 {
            let mut end = i + 1;
            while end < bytes.len() {
                let b = bytes[end];
                if b.is_ascii_alphanumeric()
                    || b == b'_'
                    || b == b'$'
                    || (b >= 0x80 && !is_non_ascii_space(code, end))
                {
                    end += 1;
                } else {
                    break;
                }
            }
            // Never split a UTF-8 sequence.
            while !code.is_char_boundary(end) {
                end += 1;
            }
            tokens.push(Token {
                kind: Kind::Word,
                start: i,
                end,
            });
            i = end;
        } else {
            tokens.push(Token {
                kind: Kind::Punct,
                start: i,
                end: i + 1,
            });
            i += 1;
        }
    }
    tokens
}

fn is_non_ascii_space(code: &str, at: usize) -> bool {
    code.is_char_boundary(at) && code[at..].chars().next().is_some_and(char::is_whitespace)
}

/// End (exclusive) of the string literal opening at `start`, or where the scan found it
/// unclosed. Python triple-quoted strings span lines; other quotes stop at a line break, a JS
/// template does not. An interpolated string (a JS template, a Python f-string) runs past its
/// interpolations, whatever they hold (`` `${ `${a}` }` ``, `f"{ {"k": v}["k"] }"`): an
/// interpolation is code, whose braces and strings, nested to any depth, do not end it, so
/// a string inside one is no string of its own (docs/normalization.md, Fallback). One pass;
/// the nesting is held in a list, not in calls. What the scan learns of the strings it reads
/// is kept in `scanned`, and what it finds there is not read again.
fn string_end(
    bytes: &[u8],
    start: usize,
    style: &Style,
    scanned: &mut Scanned,
) -> Result<usize, usize> {
    #[cfg(test)]
    if FRESH_SCANS.with(std::cell::Cell::get) {
        scanned.ends.clear(); // each scan on its own, as before `Scanned` (tests only)
    }
    if let Some(&known) = scanned.ends.get(&start) {
        return known;
    }
    let mut open = vec![Quoted::at(bytes, start, style)];
    // for each of `open`: where it opened, and how many of `scanned.pending` were there
    let mut opened = vec![(start, 0usize)];
    scanned.pending.clear();
    let mut i = start + open[0].opener();
    while i < bytes.len() {
        #[cfg(test)]
        SCAN_STEPS.with(|steps| steps.set(steps.get() + 1));
        let b = bytes[i];
        match open.last_mut() {
            Some(&mut Quoted::Text {
                quote,
                triple,
                interpolates,
            }) => {
                // The quotes just read as text (escaped: `\"`, `` \` ``; in a triple string,
                // `\"""`) open a string of this one's kind that ends where this one does: a
                // scan from them reads what this one reads from here, in the same state.
                let opener = if triple { 3 } else { 1 };
                if let Some(at) = i.checked_sub(opener).filter(|&at| at > start) {
                    if bytes[at..i].iter().all(|&q| q == quote)
                        && Quoted::at(bytes, at, style).same(quote, triple, interpolates)
                    {
                        scanned.pending.push(at);
                    }
                }
                if b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == b'\n' && !triple && quote != b'`' {
                    return Err(scanned.unclosed(&opened, i));
                }
                let closes = if triple {
                    bytes[i..].starts_with(&[quote; 3])
                } else {
                    b == quote
                };
                if closes {
                    open.pop();
                    i += if triple { 3 } else { 1 };
                    let string = opened.pop();
                    if open.is_empty() {
                        // `lex` reads on after this string: none of its quotes is read again,
                        // so a closed string (most code's) costs no entry
                        scanned.pending.clear();
                        return Ok(i);
                    }
                    scanned.closed(string, i);
                    continue;
                }
                if interpolates {
                    if quote == b'`' && b == b'$' && bytes.get(i + 1) == Some(&b'{') {
                        open.push(Quoted::Code { braces: 0 });
                        opened.push((usize::MAX, scanned.pending.len()));
                        i += 2;
                        continue;
                    }
                    if quote != b'`' && b == b'{' {
                        if bytes.get(i + 1) == Some(&b'{') {
                            i += 2; // `{{` is a brace of the text
                            continue;
                        }
                        open.push(Quoted::Code { braces: 0 });
                        opened.push((usize::MAX, scanned.pending.len()));
                    }
                }
            }
            Some(Quoted::Code { braces }) => match b {
                b'{' => *braces += 1,
                b'}' if *braces == 0 => {
                    open.pop();
                    opened.pop();
                }
                b'}' => *braces -= 1,
                b'"' | b'\'' | b'`' if b != b'`' || !style.python => {
                    // a string inside the code: its end, when a scan before found it
                    match scanned.ends.get(&i) {
                        Some(&Ok(end)) => {
                            i = end;
                            continue;
                        }
                        Some(&Err(stop)) => return Err(scanned.unclosed(&opened, stop)),
                        None => {}
                    }
                    let quoted = Quoted::at(bytes, i, style);
                    opened.push((i, scanned.pending.len()));
                    i += quoted.opener();
                    open.push(quoted);
                    continue;
                }
                _ => {}
            },
            None => return Err(scanned.unclosed(&opened, i)),
        }
        i += 1;
    }
    Err(scanned.unclosed(&opened, bytes.len()))
}

#[cfg(test)]
thread_local! {
    /// The bytes `string_end` has read on this thread (tests only: linearity).
    static SCAN_STEPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Whether `string_end` forgets what scans before found (tests only: the same tokens).
    static FRESH_SCANS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What `lex`'s scans (`string_end`) found of the strings they read, by the position of each
/// string's quote: its end, or where it was found unclosed. A scan from a quote a scan before
/// read as a string's opener, or as an escaped quote of the same string's kind (`"\"\"\"`,
/// `` `${a}\`${b}\`... ``), would read the same bytes in the same state, so its result is
/// known; each such string is scanned once, which keeps `lex` linear on unclosed strings,
/// interpolated or not (`` `${`${`${... ``, `f"{f"{f"{...`; docs/normalization.md, Fallback).
#[derive(Default)]
struct Scanned {
    ends: HashMap<usize, Result<usize, usize>>,
    /// escaped quotes of the strings being read, each string's after those of the string
    /// it is in (`opened` holds where each string's start)
    pending: Vec<usize>,
}

impl Scanned {
    /// The string `opened` (its quote, and where its escaped quotes start in `pending`) closed
    /// before `end`.
    fn closed(&mut self, opened: Option<(usize, usize)>, end: usize) {
        let Some((at, from)) = opened else {
            return;
        };
        self.ends.insert(at, Ok(end));
        for escaped in self.pending.drain(from..) {
            self.ends.insert(escaped, Ok(end));
        }
    }

    /// Every string being read (`opened`) is unclosed, found so at `stop`; returns `stop`.
    fn unclosed(&mut self, opened: &[(usize, usize)], stop: usize) -> usize {
        for &(at, _) in opened {
            if at != usize::MAX {
                self.ends.insert(at, Err(stop));
            }
        }
        for escaped in self.pending.drain(..) {
            self.ends.insert(escaped, Err(stop));
        }
        stop
    }
}

/// A string being read by `string_end`, or an interpolation's code inside one.
enum Quoted {
    Text {
        quote: u8,
        triple: bool,
        /// a JS template's `${...}` or a Python f-string's (or t-string's) `{...}`
        interpolates: bool,
    },
    Code {
        /// the braces opened in the code and not yet closed
        braces: usize,
    },
}

impl Quoted {
    /// The string whose quote is at `at` (a Python one with the prefix before it).
    fn at(bytes: &[u8], at: usize, style: &Style) -> Quoted {
        let quote = bytes[at];
        let triple = style.python && bytes[at..].starts_with(&[quote; 3]);
        // a prefix is a word of at most two letters (`f`, `rf`), not a name's end (`elif"`)
        let letters = bytes[..at]
            .iter()
            .rev()
            .take(3)
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        let prefix = &bytes[at - letters..at];
        let interpolates = quote == b'`'
            || (style.python
                && letters <= 2
                && prefix
                    .iter()
                    .any(|b| matches!(b, b'f' | b'F' | b't' | b'T')));
        Quoted::Text {
            quote,
            triple,
            interpolates,
        }
    }

    /// Whether this is a string of that quote, triple or not, interpolating or not.
    fn same(&self, quote: u8, triple: bool, interpolates: bool) -> bool {
        matches!(*self, Quoted::Text { quote: q, triple: t, interpolates: i }
            if (q, t, i) == (quote, triple, interpolates))
    }

    /// How many bytes its opening quote takes.
    fn opener(&self) -> usize {
        match self {
            Quoted::Text { triple: true, .. } => 3,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `string_end` reads to lex `code`, and its tokens; each scan on its own with
    /// `fresh`.
    fn lexed(code: &str, style: &Style, fresh: bool) -> (usize, Vec<(usize, usize, bool)>) {
        FRESH_SCANS.with(|f| f.set(fresh));
        SCAN_STEPS.with(|steps| steps.set(0));
        let tokens = lex(code, style)
            .iter()
            .map(|t| (t.start, t.end, t.kind == Kind::Str))
            .collect();
        FRESH_SCANS.with(|f| f.set(false));
        (SCAN_STEPS.with(std::cell::Cell::get), tokens)
    }

    const STYLES: [Option<Lang>; 3] = [Some(Lang::Python), Some(Lang::JavaScript), None];

    #[test]
    fn unclosed_interpolated_strings_are_scanned_in_linear_steps() {
        // about 1 MB each: every quote opens a string left unclosed after entering an
        // interpolation, read once for each quote before it without `Scanned` (200 KB of
        // `` `${ `` took 14 s, of `f"{` 58 s): here a bounded number of steps per byte
        for (unit, lang) in [
            ("`${", None),
            ("`${", Some(Lang::JavaScript)),
            ("`${\"", None),
            ("`${{", Some(Lang::JavaScript)),
            ("`${}\\`", Some(Lang::JavaScript)),
            ("`${'`", Some(Lang::JavaScript)),
            ("f\"{", Some(Lang::Python)),
            ("f\"{'", Some(Lang::Python)),
            ("f'{f\"{", Some(Lang::Python)),
            ("f\"{}\\\"", Some(Lang::Python)),
            ("\"\\\"", Some(Lang::Python)),
            ("f\"\"\"{", Some(Lang::Python)),
        ] {
            let code = unit.repeat((1 << 20) / unit.len());
            let (steps, _) = lexed(&code, &style(lang), false);
            assert!(steps <= 4 * code.len(), "{unit:?}: {steps} steps");
        }
    }

    #[test]
    fn every_short_repeated_unit_lexes_alike_in_linear_steps() {
        // every unit of up to 4 bytes of quotes, braces, escapes, prefixes and breaks: the
        // same tokens as scans that forget each other, and a bounded number of steps per byte
        // (a quadratic scan reads about a hundred times more at 2 KB)
        let alphabet = ["`", "$", "{", "}", "\\", "\"", "'", "f", "\n", "a"];
        let mut units = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = units
                .iter()
                .flat_map(|u| alphabet.iter().map(move |a| format!("{u}{a}")))
                .collect();
            units.extend(longer);
        }
        units.sort();
        units.dedup();
        for lang in STYLES {
            let style = style(lang);
            for unit in units.iter().filter(|u| !u.is_empty()) {
                let short = unit.repeat(48 / unit.len());
                assert_eq!(
                    lexed(&short, &style, false).1,
                    lexed(&short, &style, true).1,
                    "{unit:?}"
                );
                let long = unit.repeat(2048 / unit.len());
                let (steps, _) = lexed(&long, &style, false);
                assert!(steps <= 8 * long.len(), "{unit:?} {lang:?}: {steps} steps");
            }
        }
    }
}
