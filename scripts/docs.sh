#!/usr/bin/env bash
# The collection's docs site (make docs): antsibull-docs renders every module, filter and role (roles from
# meta/argument_specs.yml) of this checkout into reStructuredText, Sphinx builds the HTML into .build/docs/html.
# Offline: the Sphinx configuration (.config/docs/conf.py) links Ansible's own docs by URL instead of intersphinx.
# Any documentation error fails the build: lint-collection-docs first, then --fail-on-error, then Sphinx with -W.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PATH="$VENV/bin:$PATH"
export ANSIBLE_CONFIG="$REPO_ROOT/ansible.cfg"

out="$REPO_ROOT/.build/docs"
rm -rf "$out"
mkdir -p "$out/rst"
chmod og-w "$out/rst"  # antsibull-docs wants its output directory writable only by itself

# Every plugin's and role's documentation against the schema, and docs/docsite/links.yml.
antsibull-docs lint-collection-docs --plugin-docs --skip-rstcheck .

# --use-current finds llmops.serving through ansible.cfg's collections_path (collections/ links this checkout).
antsibull-docs --config-file .config/docs/antsibull-docs.cfg collection --use-current --fail-on-error \
  --cleanup everything --dest-dir "$out/rst" llmops.serving
cp .config/docs/index.rst "$out/rst/index.rst"

sphinx-build -q -b html -c .config/docs -W --keep-going -d "$out/doctrees" "$out/rst" "$out/html"
log "docs: $(find "$out/rst/collections/llmops/serving" -name '*.rst' ! -name index.rst | wc -l) pages, open ${out#"$REPO_ROOT"/}/html/index.html"
