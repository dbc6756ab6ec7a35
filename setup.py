"""Build hook: the wheel carries the repository's run configs as rulka/configs/*.yaml.

Everything else about the package is in setup.cfg. The configs stay in configs/ at the top of
the repository (where the README's commands name them); ``rulka.bundled`` finds them in either
place, so ``rulka run configs/sim_iqn.yaml`` works from any folder once rulka is installed.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConfigs(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "configs"
        target = Path(self.build_lib) / "rulka" / "configs"
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(source.glob("*.yaml")):
            shutil.copyfile(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithConfigs})
