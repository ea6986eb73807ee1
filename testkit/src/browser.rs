//! A real headless Chromium driven over the W3C WebDriver protocol by
//! Debian's `chromedriver`: enough of the protocol (open, find, type,
//! click, run a script, screenshot) for the dashboard's test, with no
//! client library between the test and the driver.

use base64::Engine as _;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; the driver (and its browser) stop when it drops.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    profile: std::path::PathBuf,
}

/// One element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session makes the driver quit Chromium; killing the
        // driver alone left Chromium and its helpers running.
        end_session(&self.session);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `DELETE` on the session, by hand: `drop` cannot await the async client.
fn end_session(session_url: &str) {
    use std::io::{Read, Write};
    let Some((authority, path)) = session_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
    else {
        return;
    };
    let Ok(addr) = authority.parse::<std::net::SocketAddr>() else {
        return;
    };
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!(
        "DELETE /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_end(&mut Vec::new());
    }
}

/// Whether Chromium and its driver are installed (`scripts/test.sh` installs them).
pub fn available() -> bool {
    std::path::Path::new(CHROMIUM).exists() && std::path::Path::new(CHROMEDRIVER).exists()
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session
    /// with a fresh profile and Chromium's own background traffic off (no
    /// update checks, no sync: the machine may have no network at all).
    pub async fn start() -> Browser {
        let port = crate::cluster::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = std::env::temp_dir().join(format!("placement-ui-profile-{port}"));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,2000",
        ]
        .map(String::from)
        .into_iter()
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session answer");
        let id = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"));
        Browser {
            session: format!("{base}/session/{id}"),
            http,
            driver,
            profile,
        }
    }

    /// One WebDriver command; its `value`, or a panic with the driver's error.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("webdriver request");
        let status = resp.status();
        let answer: Value = resp.json().await.expect("webdriver answer");
        assert!(status.is_success(), "{method} {path}: {status} {answer}");
        answer["value"].clone()
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Every element matching a CSS selector.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .command(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The one element matching a CSS selector.
    pub async fn find(&self, css: &str) -> Element {
        let all = self.find_all(css).await;
        assert_eq!(all.len(), 1, "{css} should match exactly one element");
        all[0].clone()
    }

    /// An element's rendered text.
    pub async fn text(&self, e: &Element) -> String {
        let path = format!("/element/{}/text", e.0);
        let v = self.command(reqwest::Method::GET, &path, None).await;
        v.as_str().unwrap_or_default().to_string()
    }

    /// Replaces an input's value by typing `text`.
    pub async fn type_into(&self, e: &Element, text: &str) {
        let clear = format!("/element/{}/clear", e.0);
        self.command(reqwest::Method::POST, &clear, Some(json!({})))
            .await;
        let value = format!("/element/{}/value", e.0);
        self.command(reqwest::Method::POST, &value, Some(json!({ "text": text })))
            .await;
    }

    /// Clicks an element.
    pub async fn click(&self, e: &Element) {
        let path = format!("/element/{}/click", e.0);
        self.command(reqwest::Method::POST, &path, Some(json!({})))
            .await;
    }

    /// Runs a script's body in the page and returns what it returns.
    pub async fn script(&self, body: &str) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": body, "args": []})),
        )
        .await
    }

    /// Waits until a script's body returns true.
    pub async fn wait_until(&self, what: &str, condition: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.script(condition).await != Value::Bool(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A PNG of the viewport, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let v = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 screenshot"))
            .expect("decode screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("artifact directory");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}
