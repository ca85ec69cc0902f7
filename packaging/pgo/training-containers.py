#!/usr/bin/env python3
"""Writes the training workload of the PGO build: v1.Container JSON documents, one per line.

Generated (seeded, so every build trains on the same bytes), not taken from the golden corpus the
benchmark measures: a profile that only fits the benchmark's inputs would flatter it. The mix is
what nodes send the hash: mostly valid containers of every field family, in compact, spaced and
indented layouts, with escapes, non-ASCII text, quantities in every notation, unknown fields,
case-folded and repeated keys, and a few documents Go rejects (so the error paths are profiled as
rare, not as never run).

    packaging/pgo/training-containers.py [COUNT] > containers.jsonl
"""

import json
import random
import sys

rng = random.Random(20261126)

WORDS = ["api", "web", "worker", "cache", "db", "proxy", "sidecar", "metrics", "auth", "queue",
         "ingest", "batch", "edge", "agent", "log", "shard", "north", "south", "blue", "green"]
TEXT = ["plain", "with space", "tab\there", "quote\"inside", "back\\slash", "<html>&amp;",
        "caf\u00e9", "\u65e5\u672c\u8a9e", "emoji \U0001f680", "line\nbreak", "\u2028sep",
        "ctrl\u0001x", "percent%20", "{\"json\":true}", ""]
QTY_CPU = ["100m", "250m", "1", "2", "0.5", "1500m", "4", "0", "1e3", "3.25"]
QTY_MEM = ["64Mi", "128Mi", "1Gi", "2G", "512M", "1.5Gi", "100000", "1e9", "0.5Ti", "300Ki",
           "12345678", "1Ei"]


def word(n=2):
    return "-".join(rng.choice(WORDS) for _ in range(n))


def text():
    return rng.choice(TEXT + [word(rng.randint(1, 4)) for _ in range(6)])


def image():
    repo = rng.choice(["registry.local", "quay.io/org", "ghcr.io/team", "docker.io/library"])
    tail = rng.choice([":v%d.%d.%d" % (rng.randint(0, 3), rng.randint(0, 20), rng.randint(0, 9)),
                       "@sha256:" + "".join(rng.choice("0123456789abcdef") for _ in range(64)),
                       ""])
    return f"{repo}/{word(rng.randint(1, 2))}{tail}"


def port():
    return rng.choice([rng.randint(1, 65535), rng.choice(["http", "grpc", "metrics"]),
                       str(rng.randint(1, 65535))])


def handler(probe):
    kind = rng.choice(["exec", "httpGet", "tcpSocket"] + (["grpc"] if probe else ["sleep"]))
    if kind == "exec":
        return {"exec": {"command": ["sh", "-c", text()]}}
    if kind == "httpGet":
        h = {"path": "/" + word(1), "port": port()}
        if rng.random() < 0.4:
            h["scheme"] = rng.choice(["HTTP", "HTTPS"])
        if rng.random() < 0.3:
            h["httpHeaders"] = [{"name": "X-" + word(1), "value": text()}]
        if rng.random() < 0.2:
            h["host"] = "127.0.0.1"
        return {"httpGet": h}
    if kind == "tcpSocket":
        return {"tcpSocket": {"port": port()}}
    if kind == "grpc":
        g = {"port": rng.randint(1, 65535)}
        if rng.random() < 0.5:
            g["service"] = word(1)
        return {"grpc": g}
    return {"sleep": {"seconds": rng.randint(1, 60)}}


def probe():
    p = handler(True)
    for k in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
              "failureThreshold", "terminationGracePeriodSeconds"]:
        if rng.random() < 0.4:
            p[k] = rng.randint(0, 120)
    return p


def env_var():
    e = {"name": rng.choice(["HOME", "PORT", "MODE", "POD_IP", "NODE", "LIMIT"]) + str(rng.randint(0, 9))}
    r = rng.random()
    if r < 0.55:
        e["value"] = text()
    elif r < 0.65:
        e["valueFrom"] = {"fieldRef": {"fieldPath": rng.choice(["status.podIP", "spec.nodeName",
                                                                "metadata.name"])}}
    elif r < 0.75:
        ref = {"resource": rng.choice(["limits.cpu", "requests.memory"])}
        if rng.random() < 0.5:
            ref["divisor"] = rng.choice(["1m", "1Mi", "1"])
        e["valueFrom"] = {"resourceFieldRef": ref}
    elif r < 0.9:
        key = rng.choice(["secretKeyRef", "configMapKeyRef"])
        e["valueFrom"] = {key: {"name": word(1), "key": word(1), "optional": rng.random() < 0.5}}
    return e


def resources():
    res = {}
    for part in ["limits", "requests"]:
        if rng.random() < 0.7:
            res[part] = {}
            if rng.random() < 0.8:
                res[part]["cpu"] = rng.choice(QTY_CPU + [rng.randint(1, 8)])
            if rng.random() < 0.8:
                res[part]["memory"] = rng.choice(QTY_MEM)
            if rng.random() < 0.1:
                res[part]["example.com/device"] = str(rng.randint(1, 4))
    if rng.random() < 0.1:
        res["claims"] = [{"name": word(1)}]
    return res


def security_context():
    sc = {}
    for k in ["privileged", "readOnlyRootFilesystem", "runAsNonRoot", "allowPrivilegeEscalation"]:
        if rng.random() < 0.3:
            sc[k] = rng.random() < 0.5
    for k in ["runAsUser", "runAsGroup"]:
        if rng.random() < 0.3:
            sc[k] = rng.randint(0, 65534)
    if rng.random() < 0.3:
        sc["capabilities"] = {"add": ["NET_ADMIN"], "drop": ["ALL"]}
    if rng.random() < 0.2:
        sc["seccompProfile"] = {"type": "RuntimeDefault"}
    if rng.random() < 0.1:
        sc["seLinuxOptions"] = {"level": "s0:c123,c456"}
    return sc


def container():
    c = {"name": word(rng.randint(1, 3)), "image": image()}
    optional = {
        "command": lambda: [text() for _ in range(rng.randint(1, 4))],
        "args": lambda: [text() for _ in range(rng.randint(1, 6))],
        "workingDir": lambda: "/" + word(1),
        "ports": lambda: [dict({"containerPort": rng.randint(1, 65535)},
                               **({"name": word(1)[:15]} if rng.random() < 0.6 else {}),
                               **({"protocol": rng.choice(["TCP", "UDP", "SCTP"])}
                                  if rng.random() < 0.4 else {}))
                          for _ in range(rng.randint(1, 3))],
        "envFrom": lambda: [{"configMapRef": {"name": word(1)}}],
        "env": lambda: [env_var() for _ in range(rng.randint(1, 8))],
        "resources": resources,
        "resizePolicy": lambda: [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
        "volumeMounts": lambda: [{"name": word(1), "mountPath": "/" + word(2),
                                  "readOnly": rng.random() < 0.5}
                                 for _ in range(rng.randint(1, 4))],
        "livenessProbe": probe,
        "readinessProbe": probe,
        "startupProbe": probe,
        "lifecycle": lambda: {"postStart": handler(False), "preStop": handler(False)},
        "terminationMessagePath": lambda: "/dev/termination-log",
        "terminationMessagePolicy": lambda: rng.choice(["File", "FallbackToLogsOnError"]),
        "imagePullPolicy": lambda: rng.choice(["Always", "IfNotPresent", "Never"]),
        "securityContext": security_context,
        "stdin": lambda: rng.random() < 0.5,
        "tty": lambda: rng.random() < 0.5,
        "restartPolicy": lambda: "Always",
        "unknownField": lambda: {"nested": [1, 2.5, None, True, "x"]},
    }
    for key, make in optional.items():
        if rng.random() < 0.45:
            c[key] = make()
    return c


def render(doc):
    layout = rng.random()
    if layout < 0.4:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=rng.random() < 0.3)
    if layout < 0.8:
        return json.dumps(doc, ensure_ascii=rng.random() < 0.3)
    # Indented documents must still fit on one line: keep the indentation, drop the newlines.
    return json.dumps(doc, indent=1).replace("\n", " ")


def oddity(line):
    """A line Go decodes oddly or rejects."""
    r = rng.random()
    if r < 0.25:
        return line.replace('"name"', '"NAME"', 1)
    if r < 0.45:
        return line[:-1] + ', "image": "' + image() + '"}'
    if r < 0.6:
        return line[: rng.randint(1, len(line) - 1)]
    if r < 0.75:
        return line.replace('"tty": false', '"tty": "no"', 1).replace('"tty":false', '"tty":1', 1)
    if r < 0.9:
        return line.replace('"cpu": "', '"cpu": "x', 1).replace('"cpu":"', '"cpu":"1.2.', 1)
    return line.replace('"containerPort": ', '"containerPort": 99999999999', 1)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for _ in range(count):
        line = render(container())
        if rng.random() < 0.08:
            line = oddity(line)
        print(line)


if __name__ == "__main__":
    main()
