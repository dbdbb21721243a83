"""Package layout that pyproject.toml cannot express: conf/ ships as the package ``xirang_conf``
and each folder under plugins/ as its own top-level package, in wheels and editable installs."""

from setuptools import find_packages, setup

plugin_packages = find_packages("plugins")
package_dir = {"xirang_conf": "conf"}
package_dir.update({name: f"plugins/{name}" for name in plugin_packages if "." not in name})

setup(
    packages=[
        *find_packages(include=["xirang", "xirang.*", "xirang_core", "xirang_core.*"]),
        *find_packages(include=["xirang_service", "xirang_service.*"]),
        "xirang_conf",
        *plugin_packages,
    ],
    package_dir=package_dir,
    package_data={"": ["*.yaml", "**/*.yaml", "**/*.json", "**/*.txt", "**/*.html", "**/*.csv"]},
    include_package_data=False,
)
