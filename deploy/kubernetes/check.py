"""Schema check of the manifests in this directory (run by tests/tests/deploy.rs).

Core kinds are validated strictly against Kubernetes' own schemas by kubernetes-validate
(PyPI, installed by scripts/setup.sh --tests); KEDA's ScaledObject against
schemas/keda-scaledobject.schema.json with jsonschema. Exits non-zero on the first failure.
Usage: python3 check.py [DIR]
"""
import json
import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.30.0"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent)
    here = pathlib.Path(__file__).parent
    keda = json.loads((here / "schemas" / "keda-scaledobject.schema.json").read_text())
    checked = 0
    for path in sorted(root.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is None:
                continue
            name = f"{path.name}: {document.get('kind')}/{document.get('metadata', {}).get('name')}"
            try:
                if document.get("apiVersion") == "keda.sh/v1alpha1":
                    jsonschema.validate(document, keda)
                else:
                    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
            except Exception as error:  # every failure is reported the same way
                print(f"FAIL {name}: {error}")
                return 1
            print(f"ok {name}")
            checked += 1
    if checked == 0:
        print(f"FAIL no manifests under {root}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
