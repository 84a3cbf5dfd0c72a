"""Stand-in for the get-pip.py that ansible-test downloads from ci-files.testing.ansible.com.

ansible-test bootstraps pip into each sanity virtualenv with that script. Where only PyPI is
reachable, this does the same job: pip from the interpreter's own ensurepip, then the exact
packages ansible-test asked for (pip==X.Y and friends) from the package index.
"""

import subprocess
import sys

GET_PIP_ONLY_OPTIONS = {"--no-setuptools", "--no-wheel"}


def main():
    pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + pip_args)


if __name__ == "__main__":
    main()
