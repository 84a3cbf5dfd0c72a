# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parameter verification for the endpoints the simulator serves, written by hand after PVE's schema.

Only the subset this simulator needs; the messages are PVE::JSONSchema's (check_object, check_prop,
parse_property_string), so a client sees the same ``errors`` object a real node would return.
"""
from __future__ import annotations

import ipaddress
import re
import secrets

from pve_sim.pct_config import MAX_DEVICES, parse_device

NOT_IN_SCHEMA = "property is not defined in schema and the schema does not allow additional properties"
MISSING = "property is missing and it is not optional"

_BOOL_TRUE = ("1", "on", "yes", "true")
_BOOL_FALSE = ("0", "off", "no", "false")
_DNS_LABEL = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?)"
_DNS_NAME_RE = re.compile(r"^(?:%s\.)*%s$" % (_DNS_LABEL, _DNS_LABEL))
_MAC_RE = re.compile(r"^[a-fA-F0-9]{2}(?::[a-fA-F0-9]{2}){5}$")
_CONFIGID_RE = re.compile(r"^[a-z][a-z0-9_]+$", re.IGNORECASE)
_STORAGE_ID_RE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)


class ParamError(Exception):
    """Parameter verification failed: ``errors`` maps parameter names to PVE's messages."""

    def __init__(self, errors):
        super().__init__("Parameter verification failed.")
        self.errors = errors


class FormatError(ValueError):
    """A value does not have its format; the text is what follows "invalid format - "."""


def parse_boolean(value):
    text = str(value).lower()
    if text in _BOOL_TRUE:
        return True
    if text in _BOOL_FALSE:
        return False
    return None


# -- formats ---------------------------------------------------------------------------------------

def _format_dns_name(value):
    if not _DNS_NAME_RE.match(value):
        raise FormatError("value does not look like a valid DNS name\n")


def _format_dev(value):
    try:
        parsed = parse_device(value)
    except ValueError as error:
        raise FormatError("%s\n" % error) from None
    path = parsed["path"]
    if re.search(r"/\.\.?(?:/|$)", path) or not path.startswith("/dev/"):
        raise FormatError("%s is not a valid device path\n" % path)


def _format_pve_volume(value):
    if ":" not in value and not value.startswith("/"):
        raise FormatError("unable to parse volume ID '%s'\n" % value)


def _format_mp_string(value):
    """PVE::LXC::Config::verify_lxc_mp_string: no /./ or /../, no /. or /.. at the end, no ../ at the start."""
    if re.search(r"/\.\.?/", value) or re.search(r"/\.\.?$", value) or value.startswith("../"):
        raise FormatError("%s contains illegal character sequences\n" % value)


def _format_mp_volume(value):
    _format_mp_string(value)
    _format_pve_volume(value)


def _property_string(fields, default_key=None, required=()):
    """A validator for PVE property strings (key=value,...) with typed fields."""

    def check(value):
        seen = {}
        for part in value.split(","):
            if not part:
                continue
            if "=" in part:
                key, item = part.split("=", 1)
                if key in seen:
                    raise FormatError("duplicate key in comma-separated list property: %s\n" % key)
                if key not in fields:
                    raise FormatError("invalid key in comma-separated list property: %s\n" % key)
            elif default_key and default_key not in seen:
                key, item = default_key, part
            elif default_key:
                raise FormatError("duplicate key in comma-separated list property: %s\n" % default_key)
            else:
                raise FormatError("value without key, but schema does not define a default key\n")
            seen[key] = item
        errors = {}
        for key in required:
            if key not in seen:
                errors[key] = MISSING
        for key, item in seen.items():
            message = _check_value(fields[key], item)
            if message:
                errors[key] = message
        if errors:
            raise FormatError("format error\n" + "".join("%s: %s\n" % (key, errors[key]) for key in sorted(errors)))
        return seen

    return check


def _format_ipv4_config(value):
    if value in ("dhcp", "manual"):
        return
    try:
        ipaddress.IPv4Interface(value)
    except ValueError:
        raise FormatError("invalid format - value does not look like a valid IPv4 network configuration\n") from None
    if "/" not in value:
        raise FormatError("invalid format - value does not look like a valid IPv4 network configuration\n")


def _format_ipv6_config(value):
    if value in ("auto", "dhcp", "manual"):
        return
    try:
        ipaddress.IPv6Interface(value)
    except ValueError:
        raise FormatError("invalid format - value does not look like a valid IPv6 network configuration\n") from None


def _format_mac(value):
    if not _MAC_RE.match(value) or int(value[:2], 16) & 1:
        raise FormatError("value does not look like a valid unicast MAC address\n")


def _format_ip(version):
    def check(value):
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise FormatError("value does not look like a valid IP%s address\n" % version) from None
    return check


def _format_configid_list(value):
    for item in re.split(r"[,;\s\0]+", value.strip()):
        if item and not _CONFIGID_RE.match(item):
            raise FormatError("invalid configuration ID '%s'\n" % item)


def _format_storage_id(value):
    if not _STORAGE_ID_RE.match(value):
        raise FormatError("storage ID '%s' contains illegal characters\n" % value)


# -- type specs ------------------------------------------------------------------------------------

def _int(minimum=None, maximum=None):
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _num(minimum=None, maximum=None):
    return {"type": "number", "minimum": minimum, "maximum": maximum}


def _bool():
    return {"type": "boolean"}


def _str(fmt=None, max_length=None, min_length=None, pattern=None, enum=None):
    return {"type": "string", "format": fmt, "maxLength": max_length, "minLength": min_length, "pattern": pattern, "enum": enum}


_NET_FIELDS = {
    "name": _str(pattern=r"[-_.\w\d]+"), "bridge": _str(pattern=r"[-_.\w\d]+"), "firewall": _bool(), "gw": _str(_format_ip("v4")),
    "gw6": _str(_format_ip("v6")), "host-managed": _bool(), "hwaddr": _str(_format_mac), "ip": _str(_format_ipv4_config),
    "ip6": _str(_format_ipv6_config), "link_down": _bool(), "mtu": _int(64, 65535), "rate": _num(0), "tag": _int(1, 4094),
    "trunks": _str(pattern=r"\d+(?:;\d+)*"), "type": _str(enum=["veth"]),
}
_FEATURE_FIELDS = {
    "force_rw_sys": _bool(), "fuse": _bool(), "keyctl": _bool(), "mknod": _bool(), "mount": _str(pattern=r"[a-zA-Z0-9_; ]+"), "nesting": _bool(),
}
_MP_OPTION_FIELDS = {
    "acl": _bool(), "backup": _bool(),
    "mountoptions": _str(pattern=r"(discard|lazytime|noatime|nodev|noexec|nosuid)(;(discard|lazytime|noatime|nodev|noexec|nosuid))*"),
    "quota": _bool(), "replicate": _bool(), "ro": _bool(), "shared": _bool(), "size": _str(pattern=r"\d+(\.\d+)?[KMGT]?"),
    "volume": _str(_format_mp_volume), "mp": _str(_format_mp_string, pattern=r"/.*"),
}
_ROOTFS_FIELDS = dict((key, value) for key, value in _MP_OPTION_FIELDS.items() if key not in ("backup", "mp"))

parse_net = _property_string(_NET_FIELDS, required=("name",))
parse_features = _property_string(_FEATURE_FIELDS)
parse_rootfs = _property_string(_ROOTFS_FIELDS, default_key="volume", required=("volume",))
parse_mp = _property_string(_MP_OPTION_FIELDS, default_key="volume", required=("volume", "mp"))

# Options of a container config (PVE::LXC::Config $confdesc), settable by create and update.
CONTAINER_OPTIONS = {
    "arch": _str(enum=["amd64", "i386", "arm64", "armhf", "riscv32", "riscv64"]),
    "cmode": _str(enum=["shell", "console", "tty"]),
    "console": _bool(),
    "cores": _int(1, 8192),
    "cpulimit": _num(0, 8192),
    "cpuunits": _int(0, 500000),
    "debug": _bool(),
    "description": _str(max_length=8192),
    "entrypoint": _str(),
    "env": _str(),
    "features": _str(parse_features),
    "hookscript": _str(_format_pve_volume),
    "hostname": _str(_format_dns_name, max_length=255),
    "lock": _str(enum=["backup", "create", "destroyed", "disk", "fstrim", "migrate", "mounted", "rollback", "snapshot", "snapshot-delete"]),
    "memory": _int(16),
    "nameserver": _str(),
    "onboot": _bool(),
    "ostype": _str(enum=["debian", "devuan", "ubuntu", "centos", "fedora", "opensuse", "archlinux", "alpine", "gentoo", "nixos", "unmanaged"]),
    "protection": _bool(),
    "rootfs": _str(parse_rootfs),
    "searchdomain": _str(),
    "startup": _str(pattern=r"(?:(?:order=)?\d+)?(?:,up=\d+)?(?:,down=\d+)?"),
    "swap": _int(0),
    "tags": _str(),
    "template": _bool(),
    "timezone": _str(),
    "tty": _int(0, 6),
    "unprivileged": _bool(),
}
INDEXED_OPTIONS = (
    (re.compile(r"^net(\d+)$"), 32, _str(parse_net)),
    (re.compile(r"^dev(\d+)$"), MAX_DEVICES, _str(_format_dev)),
    (re.compile(r"^mp(\d+)$"), 256, _str(parse_mp)),
    (re.compile(r"^unused(\d+)$"), 256, _str(_format_pve_volume)),
)
VMID = _int(100, 999999999)

CREATE_EXTRA = {
    "vmid": VMID, "ostemplate": _str(max_length=255), "password": _str(min_length=5), "ssh-public-keys": _str(), "start": _bool(),
    "storage": _str(_format_storage_id), "pool": _str(), "force": _bool(), "restore": _bool(), "unique": _bool(),
    "ignore-unpack-errors": _bool(), "bwlimit": _num(0), "ha-managed": _bool(),
}
CREATE_REQUIRED = ("vmid", "ostemplate")
# Parameters whose value may span lines ("one key per line" for ssh-public-keys).
MULTILINE = ("description", "ssh-public-keys")
UPDATE_EXTRA = {"delete": _str(_format_configid_list), "revert": _str(_format_configid_list), "digest": _str(max_length=40)}


def option_spec(key):
    """The spec of a container option key, or None when the schema has no such property."""
    if key in CONTAINER_OPTIONS:
        return CONTAINER_OPTIONS[key]
    for pattern, limit, spec in INDEXED_OPTIONS:
        match = pattern.match(key)
        if match and int(match.group(1)) < limit:
            return spec
    return None


def _type_error(spec, value):
    kind = spec["type"]
    text = str(value)
    if kind == "boolean":
        return None if parse_boolean(text) is not None else "type check ('boolean') failed - got '%s'" % text
    if kind == "integer":
        if not re.match(r"^-?\d+$", text):
            return "type check ('integer') failed - got '%s'" % text
        return None
    if kind == "number":
        if not re.match(r"^-?\d+(\.\d+)?$", text):
            return "type check ('number') failed - got '%s'" % text
        return None
    return None


def _check_value(spec, value):
    """PVE's check_prop: the message for ``value`` or None."""
    message = _type_error(spec, value)
    if message:
        return message
    text = str(value)
    if spec["type"] in ("integer", "number"):
        number = float(text)
        if spec.get("maximum") is not None and number > spec["maximum"]:
            return "value must have a maximum value of %s" % spec["maximum"]
        if spec.get("minimum") is not None and number < spec["minimum"]:
            return "value must have a minimum value of %s" % spec["minimum"]
        return None
    if spec["type"] != "string":
        return None
    if spec.get("format"):
        try:
            spec["format"](text)
        except FormatError as error:
            return "invalid format - %s" % error
    if spec.get("pattern") and not re.match(r"^(?:%s)$" % spec["pattern"], text):
        return "value does not match the regex pattern"
    if spec.get("maxLength") is not None and len(text) > spec["maxLength"]:
        return "value may only be %d characters long" % spec["maxLength"]
    if spec.get("minLength") is not None and len(text) < spec["minLength"]:
        return "value must be at least %d characters long" % spec["minLength"]
    if spec.get("enum") and text not in spec["enum"]:
        return "value '%s' does not have a value in the enumeration '%s'" % (text, ", ".join(spec["enum"]))
    return None


def verify(params, extra, required=(), container_options=False):
    """Check ``params`` like PVE's validate_params; raise ParamError with every problem at once."""
    errors = {}
    for key, value in params.items():
        spec = extra.get(key)
        if spec is None and container_options:
            spec = option_spec(key)
        if spec is None:
            errors[key] = NOT_IN_SCHEMA
            continue
        if "\n" in str(value) or "\r" in str(value):
            if key not in MULTILINE:
                errors[key] = "value contains a line feed"
                continue
        message = _check_value(spec, value)
        if message:
            errors[key] = message
    for key in required:
        if key not in params:
            errors[key] = MISSING
    if errors:
        raise ParamError(errors)


# PVE's default datacenter.cfg mac_prefix (the Proxmox OUI): PVE::Tools::random_ether_addr keeps it and randomises the rest.
MAC_PREFIX = "BC:24:11"


def random_hwaddr(prefix=MAC_PREFIX):
    """A MAC address like PVE::Tools::random_ether_addr(mac_prefix): the prefix, then random octets."""
    octets = bytearray(secrets.token_bytes(6))
    octets[0] = (octets[0] & 0xFE) | 0x02  # unicast, locally administered (replaced by the prefix when there is one)
    address = ":".join("%02X" % octet for octet in octets)
    return prefix.upper() + address[len(prefix):] if prefix else address


def normalise_net(value, new_hwaddr=random_hwaddr):
    """print_lxc_network(parse_lxc_network(value)) as PVE stores a netN at create and update: a generated hwaddr
    when none is given (so the MAC stays the same across restarts), type=veth, booleans 1/0, the required key
    (name) first and the rest sorted."""
    items = dict(parse_net(value))
    if not items.get("hwaddr"):
        items["hwaddr"] = new_hwaddr()
    items["type"] = "veth"
    for key, item in items.items():
        if _NET_FIELDS[key]["type"] == "boolean":
            items[key] = "1" if parse_boolean(item) else "0"
    ordered = ["name"] + sorted(key for key in items if key != "name")
    return ",".join("%s=%s" % (key, items[key]) for key in ordered)


def normalise(key, value):
    """The value as PVE writes it into the config (booleans 0/1; netN as print_lxc_network prints it)."""
    spec = option_spec(key)
    if spec and spec["type"] == "boolean":
        return "1" if parse_boolean(value) else "0"
    if re.match(r"^net\d+$", key):
        return normalise_net(str(value))
    return str(value)
