# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE simulator's API (simulators/pve_sim) against proxmoxer, in --no-lxc mode on 127.0.0.1 with a free port."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

proxmoxer = pytest.importorskip("proxmoxer")
requests = pytest.importorskip("requests")
from proxmoxer import ProxmoxAPI  # noqa: E402  pylint: disable=wrong-import-position
from proxmoxer.core import AuthenticationError, ResourceException  # noqa: E402  pylint: disable=wrong-import-position
from proxmoxer.tools import Tasks  # noqa: E402  pylint: disable=wrong-import-position

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.gz"
UPID_RE = re.compile(r"^UPID:pve:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:(?P<type>[a-z]+):(?P<id>\d+):(?P<user>[^:]+):$")
NOT_IN_SCHEMA = "property is not defined in schema and the schema does not allow additional properties"


def _write_template(directory):
    """A small real .tar.gz with an /etc/os-release, as storage 'local' holds vztmpl archives."""
    os.makedirs(directory, exist_ok=True)
    data = b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
    with tarfile.open(os.path.join(directory, TEMPLATE), "w:gz") as archive:
        info = tarfile.TarInfo("./etc/os-release")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    # Not an archive at all: extracting it must fail inside the create task.
    with open(os.path.join(directory, "broken-template_1.0_amd64.tar.zst"), "wb") as handle:
        handle.write(b"this is not a tarball\n")


class Sim:
    def __init__(self, state_dir, *options):
        self.state_dir = str(state_dir)
        _write_template(os.path.join(self.state_dir, "var", "lib", "vz", "template", "cache"))
        env = dict(os.environ, PYTHONPATH=SIM_SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.log_path = os.path.join(self.state_dir, "serve.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, "-m", "pve_sim", "serve", "--state-dir", self.state_dir, "--listen", "127.0.0.1:0", "--no-lxc"] + list(options),
                env=env, stdout=log, stderr=subprocess.STDOUT)
        endpoint = os.path.join(self.state_dir, "endpoint.json")
        deadline = time.time() + 30
        while not os.path.exists(endpoint):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                with open(self.log_path, encoding="utf-8") as handle:
                    raise RuntimeError("pve-sim did not start:\n" + handle.read())
            time.sleep(0.05)
        time.sleep(0.05)
        with open(endpoint, encoding="utf-8") as handle:
            self.endpoint = json.load(handle)
        self.port = self.endpoint["port"]
        self.base = "https://127.0.0.1:%d/api2/json" % self.port
        # The node's self-signed certificate: clients verify against it (it names 127.0.0.1).
        self.cert = os.path.join(self.state_dir, "etc", "pve", "local", "pve-ssl.pem")
        with open(os.path.join(self.state_dir, "users.json"), encoding="utf-8") as handle:
            self.users = json.load(handle)

    def password(self, user):
        return self.users["users"][user]["password"]

    def token_secret(self, tokenid="root@pam!ansible"):
        return self.users["tokens"][tokenid]["secret"]

    def api(self, user="root@pam"):
        return ProxmoxAPI("127.0.0.1", port=self.port, user=user, password=self.password(user), verify_ssl=self.cert, timeout=15)

    def token_api(self):
        return ProxmoxAPI("127.0.0.1", port=self.port, user="root@pam", token_name="ansible", token_value=self.token_secret(),
                          verify_ssl=self.cert, timeout=15)

    def config_text(self, vmid):
        with open(os.path.join(self.state_dir, "etc", "pve", "lxc", "%d.conf" % vmid), encoding="utf-8") as handle:
            return handle.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    running = Sim(tmp_path_factory.mktemp("pve-sim"))
    yield running
    running.stop()


def wait_task(api, upid, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = api.nodes("pve").tasks(upid).status.get()
        if status["status"] == "stopped":
            return status
        time.sleep(0.05)
    raise AssertionError("task %s still running after %ss" % (upid, timeout))


def create_ct(api, vmid, **extra):
    params = {"vmid": vmid, "ostemplate": "local:vztmpl/" + TEMPLATE, "hostname": "ct%d" % vmid, "cores": 2, "memory": 1024,
              "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
    params.update(extra)
    upid = api.nodes("pve").lxc.post(**params)
    return upid, wait_task(api, upid)


def raised(call):
    with pytest.raises(ResourceException) as info:
        call()
    return info.value


# -- auth ------------------------------------------------------------------------------------------

def test_ticket_auth_reads_version_and_the_ticket_is_a_pve_ticket(sim):
    api = sim.api()
    assert api.version.get()["release"] == "9.1"
    ticket, csrf = api.get_tokens()
    assert re.match(r"^PVE:root@pam:[0-9A-F]{8}::\S+$", ticket)
    assert re.match(r"^[0-9A-F]{8}:\S+$", csrf)


def test_token_auth_reads_nodes(sim):
    nodes = sim.token_api().nodes.get()
    assert [node["node"] for node in nodes] == ["pve"]
    assert nodes[0]["ssl_fingerprint"] == sim.endpoint["fingerprint"]


def test_no_credentials_is_401_no_ticket_with_an_empty_body(sim):
    response = requests.get(sim.base + "/version", verify=sim.cert, timeout=10)
    assert (response.status_code, response.reason, response.content) == (401, "No ticket", b"")


def test_wrong_password_is_401_authentication_failure(sim):
    response = requests.post(sim.base + "/access/ticket", data={"username": "root@pam", "password": "wrong"}, verify=sim.cert, timeout=10)
    assert (response.status_code, response.reason) == (401, "authentication failure")
    assert response.json() == {"data": None, "message": "authentication failure\n"}
    with pytest.raises(AuthenticationError):
        ProxmoxAPI("127.0.0.1", port=sim.port, user="root@pam", password="wrong", verify_ssl=sim.cert, timeout=10)


def test_a_wrong_token_secret_is_401_authentication_failed(sim):
    headers = {"Authorization": "PVEAPIToken=root@pam!ansible=%s" % uuid.uuid4()}
    response = requests.get(sim.base + "/version", headers=headers, verify=sim.cert, timeout=10)
    assert (response.status_code, response.reason) == (401, "Authentication failed!")


def test_a_write_with_a_ticket_but_without_csrf_token_is_401(sim):
    ticket, _csrf = sim.api().get_tokens()
    response = requests.put(sim.base + "/nodes/pve/lxc/999/config", data={"cores": 2}, cookies={"PVEAuthCookie": ticket}, verify=sim.cert,
                            timeout=10)
    assert (response.status_code, response.reason) == (401, "Permission denied - invalid csrf token")


def test_a_user_without_vm_allocate_gets_403_permission_check_failed(sim):
    auditor = sim.api("auditor@pve")
    error = raised(lambda: auditor.nodes("pve").lxc.post(vmid=150, ostemplate="local:vztmpl/" + TEMPLATE))
    assert error.status_code == 403
    assert error.content == "Permission check failed (/vms/150, VM.Allocate)"
    assert not os.path.exists(os.path.join(sim.state_dir, "etc", "pve", "lxc", "150.conf"))


# -- ids, create, config -----------------------------------------------------------------------------

def test_nextid_skips_used_ids_and_rejects_a_used_one(sim):
    api = sim.api()
    first = int(api.cluster.nextid.get())
    create_ct(api, first)
    assert int(api.cluster.nextid.get()) == first + 1
    assert api.cluster.nextid.get(vmid=first + 50) == str(first + 50)
    error = raised(lambda: api.cluster.nextid.get(vmid=first))
    assert (error.status_code, error.errors) == (400, {"vmid": "VM %d already exists" % first})
    error = raised(lambda: api.cluster.nextid.get(vmid=99))
    assert error.errors == {"vmid": "value must have a minimum value of 100"}


def test_create_writes_pve_config_and_update_checks_the_digest(sim):
    api = sim.api()
    upid, status = create_ct(api, 201, features="nesting=1", description="GPU container\nfor SGLang")
    assert status["exitstatus"] == "OK", api.nodes("pve").tasks(upid).log.get()
    text = sim.config_text(201)
    assert text.startswith("#GPU container\n#for SGLang\narch: amd64\ncores: 2\n")
    assert "rootfs: local:201/subvol-201-disk-0.subvol,size=4G\n" in text and "unprivileged: 1\n" in text
    if os.geteuid() == 0:
        # unprivileged, the API's default: the rootfs belongs to the container's root, host uid/gid 100000 (the id map).
        rootfs = os.stat(os.path.join(sim.state_dir, "var", "lib", "vz", "images", "201", "subvol-201-disk-0.subvol"))
        assert (rootfs.st_uid, rootfs.st_gid) == (100000, 100000)
    config = api.nodes("pve").lxc(201).config.get()
    assert (config["cores"], config["memory"], config["hostname"], config["description"]) == (2, 1024, "ct201", "GPU container\nfor SGLang\n")
    digest = config["digest"]
    api.nodes("pve").lxc(201).config.put(cores=4, delete="features", digest=digest)
    after = api.nodes("pve").lxc(201).config.get()
    assert after["cores"] == 4 and "features" not in after and after["digest"] != digest
    error = raised(lambda: api.nodes("pve").lxc(201).config.put(cores=8, digest=digest))
    assert (error.status_code, error.content) == (500, "detected modified configuration - file changed by other user? Try again.")
    assert api.nodes("pve").lxc(201).config.get()["cores"] == 4


def test_creating_an_existing_vmid_fails(sim):
    api = sim.api()
    create_ct(api, 202)
    error = raised(lambda: api.nodes("pve").lxc.post(vmid=202, ostemplate="local:vztmpl/" + TEMPLATE))
    assert (error.status_code, error.content) == (500, "CT 202 already exists on node 'pve'")


def test_unknown_parameters_and_bad_values_are_rejected_with_pve_errors(sim):
    api = sim.api()
    create_ct(api, 203)
    response = requests.put(sim.base + "/nodes/pve/lxc/203/config", data={"foo": "1", "cores": "0", "hostname": "bad_name!"},
                            headers={"Authorization": "PVEAPIToken=root@pam!ansible=%s" % sim.token_secret()}, verify=sim.cert, timeout=10)
    assert (response.status_code, response.reason) == (400, "Parameter verification failed.")
    assert response.json() == {"data": None, "message": "Parameter verification failed.\n", "errors": {
        "foo": NOT_IN_SCHEMA, "cores": "value must have a minimum value of 1",
        "hostname": "invalid format - value does not look like a valid DNS name\n"}}
    error = raised(lambda: api.nodes("pve").lxc(203).config.put(net0="bridge=vmbr0", onboot="maybe", swap=-1))
    assert error.errors == {"net0": "invalid format - format error\nname: property is missing and it is not optional\n",
                            "onboot": "type check ('boolean') failed - got 'maybe'", "swap": "value must have a minimum value of 0"}
    error = raised(lambda: api.nodes("pve").lxc(203).config.put(features="nesting=1,gpu=1"))
    assert error.errors == {"features": "invalid format - invalid key in comma-separated list property: gpu\n"}


def test_raw_lxc_keys_are_not_part_of_the_api(sim):
    api = sim.api()
    create_ct(api, 204)
    key = "lxc.cgroup2.devices.allow"
    error = raised(lambda: api.nodes("pve").lxc(204).config.put(**{key: "c 195:* rwm"}))
    assert (error.status_code, error.errors) == (400, {key: NOT_IN_SCHEMA})
    assert key not in sim.config_text(204)


def test_dev_passthrough_is_refused_for_a_token_and_for_other_users_with_pves_message(sim):
    api = sim.api()
    create_ct(api, 205)
    message = "Permission check failed (configuring device passthrough is only allowed for root@pam)"
    for client in (sim.token_api(), sim.api("ops@pve")):
        error = raised(lambda client=client: client.nodes("pve").lxc(205).config.put(dev0="/dev/null"))
        assert (error.status_code, error.content) == (403, message)
    # The same user may change what its privileges cover.
    sim.api("ops@pve").nodes("pve").lxc(205).config.put(cores=3)
    assert "dev0" not in sim.config_text(205)
    error = raised(lambda: sim.token_api().nodes("pve").lxc.post(vmid=206, ostemplate="local:vztmpl/" + TEMPLATE, dev0="/dev/null"))
    assert (error.status_code, error.content) == (403, message)


def test_root_pam_with_a_ticket_may_pass_an_existing_device_but_not_a_missing_one(sim):
    api = sim.api()
    create_ct(api, 207)
    api.nodes("pve").lxc(207).config.put(dev0="/dev/null,gid=44,mode=0666")
    assert "dev0: /dev/null,gid=44,mode=0666\n" in sim.config_text(207)
    missing = "/dev/pve-sim-missing-%s" % uuid.uuid4().hex[:8]
    error = raised(lambda: api.nodes("pve").lxc(207).config.put(dev1=missing))
    assert (error.status_code, error.content) == (500, "Device %s does not exist" % missing)
    error = raised(lambda: api.nodes("pve").lxc(207).config.put(dev1="/tmp/x"))
    assert error.errors == {"dev1": "invalid format - /tmp/x is not a valid device path\n"}
    assert "dev1" not in sim.config_text(207)


def test_raw_lines_written_into_the_file_show_in_the_api_as_lxc_pairs(sim):
    api = sim.api()
    create_ct(api, 208)
    path = os.path.join(sim.state_dir, "etc", "pve", "lxc", "208.conf")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")
    config = api.nodes("pve").lxc(208).config.get()
    assert config["lxc"] == [["lxc.cgroup2.devices.allow", "c 195:* rwm"], ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]]
    api.nodes("pve").lxc(208).config.put(memory=2048)
    assert sim.config_text(208).endswith("lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")


# -- tasks -------------------------------------------------------------------------------------------

def test_tasks_have_real_upids_status_and_log(sim):
    api = sim.api()
    upid, status = create_ct(api, 209)
    match = UPID_RE.match(upid)
    assert match and match.group("type") == "vzcreate" and match.group("id") == "209" and match.group("user") == "root@pam"
    decoded = Tasks.decode_upid(upid)
    assert (decoded["node"], decoded["type"], decoded["id"]) == ("pve", "vzcreate", "209")
    assert status["exitstatus"] == "OK" and status["upid"] == upid and status["pid"] == decoded["pid"]
    log = api.nodes("pve").tasks(upid).log.get()
    assert [line["n"] for line in log] == list(range(1, len(log) + 1))
    assert log[-1]["t"] == "TASK OK" and log[0]["t"].startswith("extracting archive ")
    upid = api.nodes("pve").lxc(209).status.start.post()
    assert wait_task(api, upid)["exitstatus"] == "OK"
    assert api.nodes("pve").lxc(209).status.current.get()["status"] == "running"
    error = raised(api.nodes("pve").lxc(209).status.start.post)
    assert (error.status_code, error.content) == (500, "CT 209 already running")
    token_upid = sim.token_api().nodes("pve").lxc(209).status.shutdown.post(timeout=5)
    assert UPID_RE.match(token_upid).group("user") == "root@pam!ansible"
    assert wait_task(api, token_upid)["exitstatus"] == "OK"
    assert api.nodes("pve").lxc(209).status.current.get()["status"] == "stopped"
    upid = api.nodes("pve").lxc(209).delete()
    assert wait_task(api, upid)["exitstatus"] == "OK"
    assert 209 not in [ct["vmid"] for ct in api.nodes("pve").lxc.get()]


def test_a_create_with_a_broken_template_is_a_failed_task_not_an_http_error(sim):
    api = sim.api()
    upid = api.nodes("pve").lxc.post(vmid=210, ostemplate="local:vztmpl/broken-template_1.0_amd64.tar.zst")
    status = wait_task(api, upid)
    assert status["exitstatus"] != "OK" and status["exitstatus"].startswith("unable to create CT 210 - command 'tar xpf")
    log = api.nodes("pve").tasks(upid).log.get()
    assert log[-1]["t"] == "TASK ERROR: " + status["exitstatus"]
    assert not os.path.exists(os.path.join(sim.state_dir, "etc", "pve", "lxc", "210.conf"))


def test_a_create_from_a_template_the_storage_does_not_have_is_a_failed_task_with_pves_message(sim):
    # pve-container accepts the call (check_volume_access only parses the volid) and the vzcreate task fails when
    # restore_archive -> abs_filesystem_path -> activate_volume finds no file: "volume '...' does not exist".
    api = sim.api()
    volid = "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"
    upid = api.nodes("pve").lxc.post(vmid=213, ostemplate=volid, rootfs="local:2")
    status = wait_task(api, upid)
    assert status["exitstatus"] == "unable to create CT 213 - volume '%s' does not exist" % volid
    assert api.nodes("pve").tasks(upid).log.get()[-1]["t"] == "TASK ERROR: " + status["exitstatus"]
    assert not os.path.exists(os.path.join(sim.state_dir, "etc", "pve", "lxc", "213.conf"))
    assert not os.path.exists(os.path.join(sim.state_dir, "var", "lib", "vz", "images", "213"))
    # What the storage's listing shows is what a create finds.
    listed = [item["volid"] for item in api.nodes("pve").storage("local").content.get(content="vztmpl")]
    assert volid not in listed and "local:vztmpl/" + TEMPLATE in listed


@pytest.mark.parametrize("volid,status,message", [
    ("nosuch:vztmpl/" + TEMPLATE, 500, "storage 'nosuch' does not exist"),
    ("local:vztmpl/debian-12.img", 500, "unable to parse directory volume name 'vztmpl/debian-12.img'"),
    ("local-lvm:vztmpl/" + TEMPLATE, 500, "lvm name 'vztmpl/%s' contains illegal characters" % TEMPLATE),
    ("debian-12", 500, "unable to parse volume ID 'debian-12'"),
])
def test_a_template_volid_that_does_not_parse_is_refused_by_the_call(sim, volid, status, message):
    error = raised(lambda: sim.api().nodes("pve").lxc.post(vmid=214, ostemplate=volid))
    assert (error.status_code, error.content) == (status, message)
    assert not os.path.exists(os.path.join(sim.state_dir, "etc", "pve", "lxc", "214.conf"))


def test_storage_content_lists_only_what_the_storage_holds(sim):
    api = sim.token_api()
    templates = api.nodes("pve").storage("local").content.get(content="vztmpl")
    item = [entry for entry in templates if entry["volid"] == "local:vztmpl/" + TEMPLATE][0]
    assert (item["content"], item["format"]) == ("vztmpl", "tgz") and item["size"] > 0
    assert [entry["volid"] for entry in templates] == sorted((entry["volid"] for entry in templates), key=str.lower)
    # local-lvm holds no templates; a storage that does not exist is PVE's error.
    assert api.nodes("pve").storage("local-lvm").content.get(content="vztmpl") == []
    error = raised(lambda: api.nodes("pve").storage("nosuch").content.get(content="vztmpl"))
    assert (error.status_code, error.content) == (500, "storage 'nosuch' does not exist")


def test_a_start_with_a_missing_device_fails_the_task_with_pves_message(sim):
    api = sim.api()
    create_ct(api, 211)
    gone = "/dev/pve-sim-gone-%s" % uuid.uuid4().hex[:8]
    with open(os.path.join(sim.state_dir, "etc", "pve", "lxc", "211.conf"), "a", encoding="utf-8") as handle:
        handle.write("dev0: %s\n" % gone)
    upid = api.nodes("pve").lxc(211).status.start.post()
    status = wait_task(api, upid)
    assert status["exitstatus"] == "Device %s does not exist" % gone
    assert api.nodes("pve").tasks(upid).log.get()[-1]["t"] == "TASK ERROR: Device %s does not exist" % gone
    assert api.nodes("pve").lxc(211).status.current.get()["status"] == "stopped"


def test_storage_content_lists_the_templates_and_resources_list_the_containers(sim):
    api = sim.token_api()
    volids = [item["volid"] for item in api.nodes("pve").storage("local").content.get(content="vztmpl")]
    assert "local:vztmpl/" + TEMPLATE in volids
    create_ct(sim.api(), 212)
    resources = api.cluster.resources.get(type="vm")
    assert {"id": "lxc/212", "vmid": 212, "type": "lxc", "node": "pve", "status": "stopped", "name": "ct212"}.items() <= \
        [item for item in resources if item["vmid"] == 212][0].items()
