//! Network namespaces for nodes: one namespace a host, each joined to the
//! test's namespace by a veth on one bridge. The test (clients, pollers, a
//! store's proxy) stays in its own namespace; a cut is a blackhole route
//! inside a host's namespace, so it drops that host's packets to one
//! address and nothing else. Needs root and `ip`; [`Net::build`] says why
//! not otherwise, and the tests skip.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Hosts one net may hold. A bound, so a bad setting cannot create
/// hundreds of namespaces.
pub const HOSTS_MAX: usize = 8;

/// The host part of the bridge's address on the test's side: clients and
/// pollers reach the nodes from it.
const BRIDGE_HOST: u8 = 254;

/// The host part of the store's address on the bridge (a store's proxy
/// listens on it): a cut from the store is a blackhole route to it alone.
pub const STORE_HOST: u8 = 253;

/// Which names and addresses a test's nets take, so that tests running at
/// once (each test binary is its own process) never share either.
pub struct Family {
    /// Three letters that start every bridge, veth and namespace name (the
    /// longest name, `{prefix}9999br`, stays within the kernel's 15).
    pub prefix: &'static str,
    /// The first of the 50 second octets of `10.x.y.0/24` this family
    /// uses.
    pub second_octet_min: u32,
}

/// Namespaces, veths and a bridge named after this process and net,
/// removed on drop (also when the test panics).
pub struct Net {
    prefix: String,
    subnet: String,
    hosts: usize,
    /// Blackhole routes in place: (host, the address it cannot reach).
    cuts: Mutex<BTreeSet<(usize, String)>>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| format!("ip: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Net {
    /// `hosts` namespaces (1 to [`HOSTS_MAX`]) on one bridge; `Err` says why
    /// they cannot be built here (not root, no `ip`, no namespaces).
    pub fn build(family: &Family, hosts: usize) -> Result<Net, String> {
        assert!(hosts <= HOSTS_MAX, "{hosts} hosts, at most {HOSTS_MAX}");
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            return Err("not root".into());
        }
        static NET: AtomicU32 = AtomicU32::new(0);
        let net = NET.fetch_add(1, Ordering::Relaxed);
        let id = (std::process::id() * 4 + net) % 10_000;
        let mut net = Net {
            prefix: format!("{}{id}", family.prefix),
            subnet: format!(
                "10.{}.{}",
                family.second_octet_min + id / 250 % 50,
                id % 250
            ),
            hosts: 0,
            cuts: Mutex::new(BTreeSet::new()),
        };
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        for host in [BRIDGE_HOST, STORE_HOST] {
            let address = format!("{}.{host}/24", net.subnet);
            ip(&["addr", "add", &address, "dev", &bridge])?;
        }
        ip(&["link", "set", &bridge, "up"])?;
        for host in 1..=hosts {
            // Counted before it exists, so drop removes a half-built host.
            net.hosts = host;
            let ns = net.ns(host);
            let veth = net.veth(host);
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            let address = format!("{}/24", net.host(host));
            ip(&["-n", &ns, "addr", "add", &address, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    fn veth(&self, host: usize) -> String {
        format!("{}v{host}", self.prefix)
    }

    /// The name of `host`'s namespace.
    pub fn ns(&self, host: usize) -> String {
        format!("{}n{host}", self.prefix)
    }

    /// The address of `host` inside its namespace.
    pub fn host(&self, host: usize) -> String {
        format!("{}.{host}", self.subnet)
    }

    /// The address a store's proxy listens on, on the bridge.
    pub fn store_address(&self) -> String {
        format!("{}.{STORE_HOST}", self.subnet)
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub fn command_in(&self, host: usize, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(host)]).arg(program);
        command
    }

    fn route(&self, host: usize, to: &str, cut: bool) -> Result<(), String> {
        let mut cuts = self.cuts.lock().unwrap();
        let key = (host, to.to_string());
        if cut == cuts.contains(&key) {
            return Ok(());
        }
        let verb = if cut { "add" } else { "del" };
        let route = format!("{to}/32");
        ip(&["-n", &self.ns(host), "route", verb, "blackhole", &route])?;
        if cut {
            cuts.insert(key);
        } else {
            cuts.remove(&key);
        }
        Ok(())
    }

    /// Cuts (or heals) the path between two hosts, both ways.
    pub fn cut_pair(&self, a: usize, b: usize, cut: bool) -> Result<(), String> {
        self.route(a, &self.host(b), cut)?;
        self.route(b, &self.host(a), cut)
    }

    /// Cuts (or heals) `host` from the store's address.
    pub fn cut_store(&self, host: usize, cut: bool) -> Result<(), String> {
        self.route(host, &self.store_address(), cut)
    }

    /// Removes every cut still in place.
    pub fn heal_all(&self) {
        let cuts: Vec<_> = self.cuts.lock().unwrap().iter().cloned().collect();
        for (host, to) in cuts {
            if let Err(error) = self.route(host, &to, false) {
                println!("heal {host} -> {to}: {error}");
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in 1..=self.hosts {
            // The veth's own end first: a namespace outlives its name while
            // anything still holds it.
            let _ = ip(&["link", "del", &self.veth(host)]);
            let _ = ip(&["netns", "del", &self.ns(host)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}
