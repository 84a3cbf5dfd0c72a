"""Check that every role's meta/argument_specs.yml matches its defaults/main.yml.

Ansible validates role arguments against argument_specs, but the real default still comes from
defaults/main.yml; when the two drift apart, the documentation lies. For each role and entry point
`main`, every public default must be documented with the same default value (a template default of a non-string
option is quoted in its description instead, see templated_default_documented), and every documented
option that is not required must have a default, and every option must appear in the role's README.md.
Internal variables (leading underscore) are exempt.
"""

import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


STRING_TYPES = ("str", "path", "raw")


TEMPLATE_SOURCE_RE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\|\s*default\(.*\)\s*\}\}$")


def templated_default_documented(spec, value):
    """A template default of a non-string option stays out of argument_specs (the docs tooling types every default, and
    a template is no int or dict); its description must name the variable it follows as C(variable)."""
    if not isinstance(value, str) or spec.get("type", "str") in STRING_TYPES:
        return False
    match = TEMPLATE_SOURCE_RE.match(value.strip())
    if not match:
        return False
    description = spec.get("description") or ""
    if isinstance(description, list):
        description = " ".join(description)
    return f"C({match.group(1)})" in description


def check_role(role_dir):
    problems = []
    defaults_file = role_dir / "defaults" / "main.yml"
    specs_file = role_dir / "meta" / "argument_specs.yml"
    if not specs_file.exists():
        return [f"{role_dir.name}: meta/argument_specs.yml is missing"]
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    defaults = defaults or {}
    specs = yaml.safe_load(specs_file.read_text()) or {}
    options = ((specs.get("argument_specs") or {}).get("main") or {}).get("options") or {}
    for name, value in defaults.items():
        if name.startswith("_"):
            continue
        if not name.startswith(role_dir.name + "_"):
            problems.append(f"{role_dir.name}: default {name} is not prefixed with the role name")
        if name not in options:
            problems.append(f"{role_dir.name}: default {name} is not documented in meta/argument_specs.yml")
            continue
        if "default" not in options[name]:
            if not templated_default_documented(options[name], value):
                problems.append(f"{role_dir.name}: {name} has a default in defaults/main.yml but none in argument_specs")
        elif options[name]["default"] != value:
            problems.append(
                f"{role_dir.name}: {name} defaults differ: defaults/main.yml {value!r} != argument_specs {options[name]['default']!r}"
            )
    readme = role_dir / "README.md"
    readme_text = readme.read_text() if readme.exists() else ""
    if not readme_text:
        problems.append(f"{role_dir.name}: README.md is missing")
    for name, spec in options.items():
        if readme_text and f"`{name}`" not in readme_text:
            problems.append(f"{role_dir.name}: option {name} is not described in README.md")
        if not spec.get("required") and name not in defaults:
            problems.append(f"{role_dir.name}: option {name} is optional but has no value in defaults/main.yml")
        if not spec.get("description"):
            problems.append(f"{role_dir.name}: option {name} has no description")
    return problems


def main():
    roles = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
    problems = [problem for role in roles for problem in check_role(role)]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"argument specs: {len(roles)} roles checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
