//! Special-purpose addresses: the ranges of IANA's IPv4 and IPv6
//! Special-Purpose Address Registries that are not globally reachable
//! (loopback, link-local with the cloud metadata address, private, shared
//! CGNAT, documentation, benchmarking, the IPv6 forms that embed IPv4),
//! plus multicast and reserved space. A name never reaches one of them; an
//! address grant reaches one only where the operator opened it
//! (`--egress-allow`, [`super::grants::Allowed`]).
//!
//! Ranges IANA marks globally reachable (AS112, AMT, the PCP and TURN
//! anycast addresses) are public here too: they are not the host's
//! neighbourhood.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr};

/// IPv4 ranges, most specific first where they nest.
const V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "this-network (reaches the host itself)"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated 6to4 relay"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// IPv6 ranges that embed no IPv4 address (those are decoded first).
const V6: &[(&str, &str)] = &[
    ("::1/128", "loopback"),
    ("::/128", "unspecified (reaches the host itself)"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "deprecated ORCHID"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", "private (unique local)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
];

/// The special range `a` is in, and what kind it is (`None`: public).
/// IPv4-mapped (`::ffff:0:0/96`), NAT64 (`64:ff9b::/96`) and 6to4
/// (`2002::/16`) addresses are judged by the IPv4 address they carry, and
/// are special whatever it is (the host does not translate for guests).
pub fn range(a: IpAddr) -> Option<(IpNet, &'static str)> {
    match canonical(a) {
        IpAddr::V4(v4) => find(V4, IpAddr::V4(v4)),
        IpAddr::V6(v6) => {
            if let Some(found) = find(V6, IpAddr::V6(v6)) {
                return Some(found);
            }
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
            let (net, kind, v4) = if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                ("64:ff9b::/96", "NAT64", embedded(s[6], s[7]))
            } else if s[0] == 0x2002 {
                ("2002::/16", "6to4", embedded(s[1], s[2]))
            } else {
                return None;
            };
            let net: IpNet = net.parse().expect("a valid CIDR");
            Some(find(V4, IpAddr::V4(v4)).map_or((net, kind), |(_, inner)| (net, inner)))
        }
    }
}

/// Why `a` is never reached through a name (`None`: it is public).
pub fn special(a: IpAddr) -> Option<&'static str> {
    range(a).map(|(_, kind)| kind)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

fn find(table: &[(&str, &'static str)], a: IpAddr) -> Option<(IpNet, &'static str)> {
    table.iter().find_map(|(net, kind)| {
        let net: IpNet = net.parse().expect("a valid CIDR");
        net.contains(&a).then_some((net, *kind))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_iana_marks_not_globally_reachable_should_be_special() {
        for a in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "192.0.0.9",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.1",
            "203.0.113.1",
            "224.0.0.1",
            "240.0.0.1",
            "::",
            "::1",
            "::127.0.0.1",
            "::8.8.8.8",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::808:808",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:db8::1",
            "2002:a9fe:a9fe::1",
            "3fff::1",
            "5f00::1",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(special(ip).is_some(), "{a} is special");
        }
        assert!(special(IpAddr::V4(Ipv4Addr::BROADCAST)).is_some(), "the broadcast address");
        assert_eq!(special("::ffff:169.254.169.254".parse().unwrap()), Some("link-local (cloud metadata)"));
        assert_eq!(special("2002:a9fe:a9fe::1".parse().unwrap()), Some("link-local (cloud metadata)"));
    }

    #[test]
    fn globally_reachable_addresses_should_be_public() {
        for a in [
            "8.8.8.8",
            "93.184.216.34",
            "192.31.196.1",
            "192.52.193.1",
            "192.175.48.1",
            "2606:4700::1111",
            "2620:4f:8000::1",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(special(a.parse().unwrap()), None, "{a} is public");
        }
    }
}
