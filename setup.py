"""The packages of the wheel (the rest of the metadata is in pyproject.toml).

``templates/`` and ``static/`` stay at the top of the checkout, where the app is developed; the
wheel carries them inside the package as ``dlq_dashboard.templates`` and ``dlq_dashboard.static``
(``package_dir`` maps the two to the top-level folders), which ``dlq_dashboard.resource_folder``
finds once installed.
"""

from setuptools import find_packages, setup

RESOURCES = {"dlq_dashboard.templates": "templates", "dlq_dashboard.static": "static"}

setup(
    packages=find_packages(include=["dlq_consumer", "dlq_consumer.*", "dlq_dashboard", "dlq_dashboard.*"])
    + list(RESOURCES),
    package_dir=RESOURCES,
)
