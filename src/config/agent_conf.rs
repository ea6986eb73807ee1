//! The node agent's Keystone credentials, from the `[placement]` section
//! of its config file as nova-compute's `nova.conf` gives them (keystoneauth's
//! password plugin): `auth_type = password`, `auth_url`, `username`,
//! `password`, `project_name`, the two domain names, `region_name`,
//! `valid_interfaces` and `endpoint_override`. The file is read as
//! oslo.config reads it (`oslo_files`), so the section nova-compute has on
//! the machine serves as it is.

use super::oslo_files::{Files, Source};

/// A secret that never reaches a log, an error or `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// keystoneauth's password plugin, as `[placement]` sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeystoneCredentials {
    /// The identity endpoint (`…/v3` added when the URL has no version).
    pub auth_url: String,
    pub username: String,
    pub password: Secret,
    pub user_domain_name: String,
    pub project_name: String,
    pub project_domain_name: String,
    /// The catalog's region (None: any).
    pub region_name: Option<String>,
    /// The catalog's interfaces, in the order tried (nova's default:
    /// internal, then public).
    pub valid_interfaces: Vec<String>,
    /// The service's URL, instead of the catalog's.
    pub endpoint_override: Option<String>,
}

/// The `[placement]` section's credentials, or why they cannot serve
/// (the file and option named; never a value).
pub fn keystone_credentials(sources: &[Source]) -> Result<KeystoneCredentials, String> {
    let files = Files::read(sources)?;
    let get = |option: &str| -> Result<Option<String>, String> {
        Ok(files
            .value("placement", option)?
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty()))
    };
    let required = |option: &str| -> Result<String, String> {
        get(option)?.ok_or_else(|| format!("[placement] {option} is not set"))
    };
    match get("auth_type")?.as_deref() {
        Some("password") | Some("v3password") => {}
        Some(other) => {
            return Err(format!(
                "[placement] auth_type = {other}: the agent supports password only"
            ))
        }
        None => return Err("[placement] auth_type is not set (password)".into()),
    }
    let auth_url = required("auth_url")?;
    let auth_url = auth_url.trim_end_matches('/');
    let auth_url = if auth_url.ends_with("/v3") {
        auth_url.to_string()
    } else {
        format!("{auth_url}/v3")
    };
    let domain = |option: &str| -> Result<String, String> {
        Ok(get(option)?.unwrap_or_else(|| "Default".to_string()))
    };
    let interfaces = get("valid_interfaces")?.unwrap_or_else(|| "internal,public".into());
    Ok(KeystoneCredentials {
        auth_url,
        username: required("username")?,
        password: Secret(required("password")?),
        user_domain_name: domain("user_domain_name")?,
        project_name: required("project_name")?,
        project_domain_name: domain("project_domain_name")?,
        region_name: get("region_name")?,
        valid_interfaces: interfaces
            .split(',')
            .map(|i| i.trim().trim_end_matches("URL").to_lowercase())
            .filter(|i| !i.is_empty())
            .collect(),
        endpoint_override: get("endpoint_override")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nova_computes_section_reads_and_its_password_never_shows() {
        let dir = std::env::temp_dir().join(format!("agent-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nova.conf");
        std::fs::write(
            &file,
            "[placement]\nauth_type = password\nauth_url = http://ks:5000\nusername = nova\n\
             password = s3cret\nproject_name = service\nregion_name = RegionOne\n\
             valid_interfaces = internal\n",
        )
        .unwrap();
        let c = keystone_credentials(&[Source::File(file.clone())]).unwrap();
        assert_eq!(c.auth_url, "http://ks:5000/v3");
        assert_eq!(c.user_domain_name, "Default");
        assert_eq!(c.valid_interfaces, ["internal"]);
        assert_eq!(c.password.expose(), "s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
        std::fs::write(&file, "[placement]\nauth_type = token\n").unwrap();
        let e = keystone_credentials(&[Source::File(file)]).unwrap_err();
        assert!(e.contains("password only"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
