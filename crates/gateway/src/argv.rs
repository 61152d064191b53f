//! Secrets on the command line: `/proc/PID/cmdline` is world-readable, so a password in
//! `--database-url` or a token in `--token` is visible to every local user. They still work,
//! with a warning naming the alternative.

/// One warning per secret found in `args` (the program's arguments, without argv[0]).
pub fn secret_warnings(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let (flag, value) = match args[i].split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (args[i].as_str(), args.get(i + 1).cloned()),
        };
        match flag {
            "--database-url" if value.as_deref().is_some_and(has_password) => out.push(
                "--database-url holds a password, which every local user can read in /proc/*/cmdline: \
                 put the URL in a 0600 file and pass --database-url-file, or set OPENSHELL_DATABASE_URL"
                    .to_string(),
            ),
            "--token" if value.is_some() => out.push(
                "--token is visible to every local user in /proc/*/cmdline: keep it in the config file \
                 (~/.config/openshell/config.json, mode 0600) or set OPENSHELL_TOKEN"
                    .to_string(),
            ),
            _ => {}
        }
        i += 1;
    }
    out
}

fn has_password(url: &str) -> bool {
    url.parse::<tokio_postgres::Config>().map_or(url.contains(':') && url.contains('@'), |c| c.get_password().is_some())
}

#[cfg(test)]
mod tests {
    use super::secret_warnings;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn passwords_and_tokens_on_the_command_line_are_named() {
        assert_eq!(secret_warnings(&args(&["--database-url", "postgres://u:pw@h/db"])).len(), 1);
        assert_eq!(secret_warnings(&args(&["--database-url=postgres://h/db?password=pw"])).len(), 1);
        assert!(secret_warnings(&args(&["--database-url", "postgres://u@h/db"])).is_empty());
        assert!(secret_warnings(&args(&["--database-url-file", "/etc/url"])).is_empty());
        let w = secret_warnings(&args(&["sandbox", "list", "--token", "osu_x"]));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("OPENSHELL_TOKEN") && !w[0].contains("osu_x"), "{w:?}");
        assert!(secret_warnings(&args(&["--token=osu_x"]))[0].contains("config file"));
    }
}
