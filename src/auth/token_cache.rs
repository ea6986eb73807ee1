//! Tokens kept for a bounded time in bounded memory: validated ones with
//! their caller, refused ones with nothing (so a bad token repeated is not
//! sent to Keystone each time). An entry lives until the earlier of its
//! token's expiry and the cache lifetime;
//! a full cache first drops what has expired, then the entries closest to
//! expiring, so that memory stays bounded under a flood of distinct tokens.
//! Tokens are kept as their SHA-256 digest, as keystonemiddleware keeps
//! them: an entry costs 32 bytes whatever the token's length (anyone may
//! send 8 KB tokens to be refused and cached), and the cache holds no
//! token anyone could use.

use crate::policy::Credentials;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token's cache key: its SHA-256 digest.
type TokenKey = [u8; 32];

fn key_of(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

/// Token digest → what is known of it (`T`), until when.
#[derive(Debug)]
pub struct TokenCache<T = Credentials> {
    entries: Mutex<HashMap<TokenKey, (T, Instant)>>,
    capacity: usize,
    lifetime: Duration,
}

impl<T: Clone> TokenCache<T> {
    /// A cache of at most `capacity` tokens, each kept at most `lifetime`.
    pub fn new(capacity: usize, lifetime: Duration) -> Self {
        TokenCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            lifetime,
        }
    }

    /// What is known of a token still fresh in the cache.
    pub fn get(&self, token: &str) -> Option<T> {
        let key = key_of(token);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(&key) {
            Some((c, until)) if Instant::now() < *until => Some(c.clone()),
            Some(_) => {
                entries.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps a token until `expires` or the cache lifetime.
    pub fn put(&self, token: &str, creds: T, expires: Instant) {
        if self.lifetime.is_zero() {
            return;
        }
        let now = Instant::now();
        let until = expires.min(now + self.lifetime);
        let key = key_of(token);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, u)| *u > now);
            if entries.len() >= self.capacity {
                evict_soonest(&mut entries, self.capacity / 10 + 1);
            }
        }
        entries.insert(key, (creds, until));
    }

    /// How many tokens are held.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn evict_soonest<T>(entries: &mut HashMap<TokenKey, (T, Instant)>, n: usize) {
    let mut by_expiry: Vec<(Instant, TokenKey)> =
        entries.iter().map(|(k, (_, u))| (*u, *k)).collect();
    by_expiry.sort();
    for (_, k) in by_expiry.into_iter().take(n) {
        entries.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(user: &str) -> Credentials {
        Credentials {
            user_id: user.into(),
            ..Credentials::default()
        }
    }

    #[test]
    fn entries_expire_with_their_token_or_the_lifetime() {
        let cache = TokenCache::new(10, Duration::from_secs(300));
        let now = Instant::now();
        cache.put("a", who("a"), now + Duration::from_secs(600));
        cache.put("b", who("b"), now);
        assert_eq!(cache.get("a").map(|c| c.user_id), Some("a".into()));
        assert!(cache.get("b").is_none(), "an expired token is gone");
        let off = TokenCache::new(10, Duration::ZERO);
        off.put("a", who("a"), now + Duration::from_secs(600));
        assert!(off.get("a").is_none(), "a lifetime of 0 caches nothing");
    }

    #[test]
    fn refused_tokens_are_kept_for_their_own_lifetime() {
        let refused: TokenCache<()> = TokenCache::new(10, Duration::from_millis(50));
        refused.put("bad", (), Instant::now() + Duration::from_secs(3600));
        assert_eq!(refused.get("bad"), Some(()));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(refused.get("bad"), None, "asked again after the lifetime");
    }

    #[test]
    fn long_tokens_are_told_apart_by_their_digest() {
        let refused: TokenCache<()> = TokenCache::new(10, Duration::from_secs(300));
        let later = Instant::now() + Duration::from_secs(600);
        let long = "x".repeat(8192);
        let mut longer = long.clone();
        longer.push('y');
        refused.put(&long, (), later);
        assert_eq!(refused.get(&long), Some(()));
        assert_eq!(refused.get(&longer), None, "one byte more is another token");
        assert_eq!(refused.get(&long[..8191]), None, "one byte less too");
    }

    #[test]
    fn memory_stays_bounded() {
        let cache = TokenCache::new(100, Duration::from_secs(300));
        let later = Instant::now() + Duration::from_secs(600);
        for i in 0..10_000 {
            cache.put(&format!("t{i}"), who("x"), later + Duration::from_millis(i));
        }
        assert!(cache.len() <= 100, "{} entries", cache.len());
        assert!(cache.get("t9999").is_some(), "the newest stays");
    }
}
