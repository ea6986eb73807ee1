//! oslo.policy's check-string language, parsed into a [`Check`] tree:
//! `@`, `!`, `kind:match` checks (`role:`, `rule:`, and generic ones such
//! as `project_id:%(project_id)s` or `system_scope:all`), `not`, `and`,
//! `or` and parentheses, with oslo's precedence (`not` binds tightest,
//! then `and`, then `or`). Unlike oslo.policy, which logs a bad check
//! string and denies at request time, a bad string is an error here: the
//! policy is refused at start-up.

use std::fmt;

/// A parsed check string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// `@` or the empty string: always passes.
    Always,
    /// `!`: never passes.
    Never,
    /// `rule:NAME`: passes when the named rule passes.
    Rule(String),
    /// `role:NAME`: the caller holds the role (case-insensitive; NAME may
    /// interpolate the target).
    Role(String),
    /// `KIND:MATCH`: the caller's KIND (`user_id`, `project_id`,
    /// `system_scope`, …) equals MATCH with `%(key)s` taken from the target;
    /// a quoted KIND is a literal compared with MATCH.
    Generic {
        /// The credential (or literal) on the left.
        kind: String,
        /// The value on the right, possibly with `%(key)s`.
        expected: String,
    },
    /// `not C`.
    Not(Box<Check>),
    /// `A and B and …`.
    All(Vec<Check>),
    /// `A or B or …`.
    Any(Vec<Check>),
}

/// Why a check string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Not,
    Leaf(Check),
}

/// How deep `not` and parentheses may nest in one check string. Real
/// policies nest two or three deep; without a bound, a string of 50,000
/// `not`s overflowed the stack and aborted the process (issue 64).
pub const MAX_NESTING: usize = 32;

/// Parses one check string.
pub fn parse(text: &str) -> Result<Check, ParseError> {
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Ok(Check::Always);
    }
    let mut p = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let check = p.or()?;
    match p.tokens.get(p.at) {
        None => Ok(check),
        Some(t) => Err(ParseError(format!(
            "unexpected {} in \"{}\"",
            describe(t),
            shortened(text)
        ))),
    }
}

/// A check string as an error quotes it: its first 100 characters.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

fn describe(t: &Token) -> &'static str {
    match t {
        Token::Open => "'('",
        Token::Close => "')'",
        Token::And => "'and'",
        Token::Or => "'or'",
        Token::Not => "'not'",
        Token::Leaf(_) => "a check",
    }
}

/// oslo's tokenizer: words split on whitespace, parentheses peeled off
/// their ends.
fn tokenize(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let opened = word.len() - word.trim_start_matches('(').len();
        out.extend(std::iter::repeat_n(Token::Open, opened));
        let rest = &word[opened..];
        let core = rest.trim_end_matches(')');
        let closed = rest.len() - core.len();
        if !core.is_empty() {
            out.push(word_token(core)?);
        }
        out.extend(std::iter::repeat_n(Token::Close, closed));
    }
    Ok(out)
}

fn word_token(word: &str) -> Result<Token, ParseError> {
    Ok(match word.to_ascii_lowercase().as_str() {
        "and" => Token::And,
        "or" => Token::Or,
        "not" => Token::Not,
        _ => Token::Leaf(leaf(word)?),
    })
}

fn leaf(word: &str) -> Result<Check, ParseError> {
    match word {
        "@" => return Ok(Check::Always),
        "!" => return Ok(Check::Never),
        _ => {}
    }
    let Some((kind, expected)) = word.split_once(':') else {
        return Err(ParseError(format!(
            "\"{}\" is not a check (expected KIND:VALUE, @ or !)",
            shortened(word)
        )));
    };
    if kind.is_empty() || expected.is_empty() {
        return Err(ParseError(format!(
            "\"{}\" is not a check (expected KIND:VALUE)",
            shortened(word)
        )));
    }
    Ok(match kind {
        "rule" => Check::Rule(expected.to_string()),
        "role" => Check::Role(expected.to_string()),
        "http" | "https" => {
            return Err(ParseError(format!(
                "\"{word}\": http checks are not supported"
            )))
        }
        _ => Check::Generic {
            kind: kind.to_string(),
            expected: expected.to_string(),
        },
    })
}

/// Recursive descent over `or` > `and` > `not` > atoms.
struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// `not`s and parentheses open around the token at `at`.
    depth: usize,
}

impl Parser {
    /// One level deeper, refused past [`MAX_NESTING`].
    fn deeper(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(ParseError(format!(
                "'not' and parentheses nest more than {MAX_NESTING} deep"
            )));
        }
        Ok(())
    }

    fn eat(&mut self, want: &Token) -> bool {
        if self.tokens.get(self.at) == Some(want) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Check, ParseError> {
        let mut parts = vec![self.and()?];
        while self.eat(&Token::Or) {
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Check::Any(parts)
        })
    }

    fn and(&mut self) -> Result<Check, ParseError> {
        let mut parts = vec![self.not()?];
        while self.eat(&Token::And) {
            parts.push(self.not()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Check::All(parts)
        })
    }

    fn not(&mut self) -> Result<Check, ParseError> {
        if self.eat(&Token::Not) {
            self.deeper()?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Check::Not(Box::new(inner)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Check, ParseError> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        match token {
            Some(Token::Leaf(c)) => Ok(c),
            Some(Token::Open) => {
                self.deeper()?;
                let inner = self.or()?;
                self.depth -= 1;
                if self.eat(&Token::Close) {
                    Ok(inner)
                } else {
                    Err(ParseError("unbalanced '(': missing ')'".into()))
                }
            }
            Some(t) => Err(ParseError(format!(
                "expected a check, found {}",
                describe(&t)
            ))),
            None => Err(ParseError("the check string ends too early".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(r: &str) -> Check {
        Check::Role(r.into())
    }

    #[test]
    fn specials_and_empty() {
        assert_eq!(parse("@"), Ok(Check::Always));
        assert_eq!(parse(""), Ok(Check::Always));
        assert_eq!(parse("  "), Ok(Check::Always));
        assert_eq!(parse("!"), Ok(Check::Never));
    }

    #[test]
    fn precedence_is_not_then_and_then_or() {
        assert_eq!(
            parse("role:a or role:b and not role:c"),
            Ok(Check::Any(vec![
                role("a"),
                Check::All(vec![role("b"), Check::Not(Box::new(role("c")))])
            ]))
        );
        assert_eq!(
            parse("(role:a or role:b) and role:c"),
            Ok(Check::All(vec![
                Check::Any(vec![role("a"), role("b")]),
                role("c")
            ]))
        );
        assert_eq!(
            parse("((role:a))"),
            Ok(role("a")),
            "nested parentheses peel"
        );
    }

    #[test]
    fn generic_checks_keep_their_interpolation() {
        assert_eq!(
            parse("project_id:%(project_id)s"),
            Ok(Check::Generic {
                kind: "project_id".into(),
                expected: "%(project_id)s".into()
            })
        );
        assert_eq!(
            parse("rule:admin_api OR system_scope:all"),
            Ok(Check::Any(vec![
                Check::Rule("admin_api".into()),
                Check::Generic {
                    kind: "system_scope".into(),
                    expected: "all".into()
                }
            ]))
        );
    }

    #[test]
    fn malformed_strings_are_errors() {
        for bad in [
            "role:a or",
            "and role:a",
            "(role:a",
            "role:a)",
            "admin",
            "role:",
            ":x",
            "role:a role:b",
            "not",
            "()",
            "http://example.com",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn nesting_is_bounded_and_said() {
        let nots = |n: usize| format!("{}role:a", "not ".repeat(n));
        assert!(parse(&nots(MAX_NESTING)).is_ok());
        let e = parse(&nots(50_000)).unwrap_err();
        assert!(e.0.contains("nest more than 32 deep"), "{e}");
        let parens = |n: usize| format!("{}role:a{}", "(".repeat(n), ")".repeat(n));
        assert!(parse(&parens(MAX_NESTING)).is_ok());
        assert!(parse(&parens(MAX_NESTING + 1)).is_err());
        assert!(parse(&parens(100_000)).is_err());
    }
}
