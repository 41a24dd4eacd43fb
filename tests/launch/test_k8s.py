"""`gymhub launch k8s`: manifests that validate against the Kubernetes schemas, offline.

Checked with kubernetes-validate's bundled schemas for a fixed Kubernetes version (no
network, no cluster), in strict mode (an unknown field is an error), and read back
with PyYAML to prove the YAML text is the same data.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from gymhub.errors import ConfigError
from gymhub.launch import cli, k8s
from gymhub.launch.yaml_text import dump_all

K8S_VERSION = "1.30.0"


def by_kind(docs):
    return {d["kind"]: d for d in docs}


@pytest.mark.parametrize("sandbox", k8s.SANDBOXES)
def test_every_manifest_validates_against_the_kubernetes_schemas(sandbox):
    docs = k8s.manifests(["echo-v0", "sql-v0"], servers=4, image="registry.example/gymhub:0.1",
                         token_secret="gymhub-token", sandbox=sandbox, namespace="rl",
                         serve_args=["--max-episodes", "2048"])
    assert sorted(d["kind"] for d in docs) == ["PodDisruptionBudget", "Service", "StatefulSet"]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_validation_is_real():
    sts = by_kind(k8s.manifests(["echo-v0"], servers=2, image="x"))["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSION, strict=True)


def test_one_stable_name_per_server_through_a_headless_service():
    docs = by_kind(k8s.manifests(["echo-v0"], servers=3, image="x", name="envs",
                                 namespace="rl", port=9000))
    svc, sts = docs["Service"], docs["StatefulSet"]
    assert svc["spec"]["clusterIP"] == "None"  # headless: no load balancing
    assert "sessionAffinity" not in svc["spec"] and svc["spec"].get("type") in (None, "ClusterIP")
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] == "envs"
    assert sts["spec"]["replicas"] == 3
    assert svc["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
    assert k8s.server_urls(name="envs", servers=3, namespace="rl", port=9000) == [
        f"http://envs-{i}.envs.rl.svc.cluster.local:9000" for i in range(3)]


def test_probes_grace_period_resources_token_and_pdb():
    docs = by_kind(k8s.manifests(["echo-v0"], servers=2, image="x", token_secret="tok",
                                 cpu="2", memory="3Gi", drain_timeout_s=45))
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz"
    live = c["livenessProbe"]
    # a draining server answers /healthz 503: liveness must not kill it mid-drain
    assert live["periodSeconds"] * live["failureThreshold"] > 45
    assert pod["terminationGracePeriodSeconds"] > 45
    assert "--drain-timeout" in c["args"] and c["args"][c["args"].index("--drain-timeout") + 1] == "45"
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "2", "memory": "3Gi"}
    (token,) = [e for e in c["env"] if e["name"] == "GYMHUB_SERVER_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "tok", "key": "token"}
    assert not any("token" in a for a in c["args"])  # never on the command line
    pdb = docs["PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == docs["StatefulSet"]["spec"]["selector"]["matchLabels"]


def test_sandbox_profiles():
    def ctx(sandbox):
        pod = by_kind(k8s.manifests(["code-v0"], servers=1, image="x", sandbox=sandbox))[
            "StatefulSet"]["spec"]["template"]["spec"]
        return pod.get("securityContext", {}), pod["containers"][0]["securityContext"]

    pod, container = ctx("bwrap")  # user namespaces, a fresh /proc, cgroups: privileged root
    assert container["privileged"] is True and container["runAsUser"] == 0
    pod, container = ctx("none")
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == k8s.IMAGE_UID
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_rendered_yaml_is_the_same_data_with_the_urls_in_a_comment():
    text = k8s.render(["echo-v0"], servers=2, image="r/g:1", token_secret="tok")
    assert list(yaml.safe_load_all(text)) == k8s.manifests(["echo-v0"], servers=2, image="r/g:1",
                                                           token_secret="tok")
    assert "#   http://gymhub-1.gymhub.default.svc.cluster.local:8000" in text
    assert "create secret generic tok" in text


def test_yaml_emitter_quotes_what_yaml_would_misread():
    data = {"a": ["yes", "no", "on", "null", "~", "1", "1.5", "-x", " x", "a: b", "a#b", "",
                  "$(VAR)", "ünï", "/healthz", "x=y"],
            "n": None, "t": True, "f": 1.25, "i": 3, "e": {}, "l": [], "nested": [[1, []], {}]}
    assert yaml.safe_load(dump_all([data])) == data


@pytest.mark.parametrize("kwargs", [
    {"name": "Bad_Name"}, {"namespace": "x" * 64}, {"servers": 0}, {"sandbox": "docker"},
])
def test_bad_input_is_a_config_error(kwargs):
    args = {"servers": 1, "image": "x", **kwargs}
    with pytest.raises(ConfigError):
        k8s.manifests(["echo-v0"], **args)


def run_cli(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_prints_manifests_urls_and_dockerfile(capsys):
    rc, out, _ = run_cli(["k8s", "echo-v0", "--servers", "2", "--image", "r/g:1",
                          "--token-secret", "tok", "--cpu", "500m", "--memory", "1Gi",
                          "--sandbox", "none", "--serve-arg=--max-episodes", "--serve-arg", "64"],
                         capsys)
    assert rc == 0
    docs = list(yaml.safe_load_all(out))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    c = by_kind(docs)["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][-2:] == ["--max-episodes", "64"]
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}

    rc, out, _ = run_cli(["k8s", "echo-v0", "--servers", "2", "--image", "x", "--urls",
                          "--namespace", "rl"], capsys)
    assert rc == 0 and out.split() == k8s.server_urls(name="gymhub", servers=2, namespace="rl")

    rc, out, _ = run_cli(["k8s", "echo-v0", "--servers", "1", "--image", "x", "--dockerfile"],
                         capsys)
    assert rc == 0 and out.startswith("# syntax=docker/dockerfile:1")
    for needed in ("FROM python:", "bubblewrap", "gymhub[server]", "USER 10001", "ENTRYPOINT"):
        assert needed in out

    rc, out, _ = run_cli(["k8s", "echo-v0", "--servers", "1", "--image", "x", "--dockerfile",
                          "--package", "dist/gymhub-0.1.0-py3-none-any.whl"], capsys)
    assert "COPY dist/gymhub-0.1.0-py3-none-any.whl /tmp/gymhub-0.1.0-py3-none-any.whl\n" in out
    assert 'pip install --no-cache-dir "/tmp/gymhub-0.1.0-py3-none-any.whl[server]"' in out


def test_cli_reports_a_bad_name_in_one_line(capsys):
    rc, out, err = run_cli(["k8s", "echo-v0", "--servers", "1", "--image", "x",
                            "--name", "No"], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("gymhub: error: name 'No' must be a DNS label") and "Traceback" not in err
