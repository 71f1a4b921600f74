"""The installer recipes, checked without building: the spec collects the bundled resources,
the trims leave what the app needs, the release workflow parses and uses the same spec, and
``bayescope --self-test`` passes from the source tree.

The full build (``bash packaging/build-linux.sh``, about a quarter of an hour) is not run here.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bundle():
    return _load("bayescope_packaging_bundle", PACKAGING / "bundle.py")


# ------------------------------------------------------------------ the spec and its data


def test_spec_collects_every_bundled_posterior_example_and_icon(bundle):
    datas = {(Path(src).resolve(), dest) for src, dest in bundle.resource_datas(ROOT)}
    posteriors = sorted((ROOT / "resources" / "models").glob("*.pt"))
    assert posteriors, "no bundled posteriors to check"
    for path in posteriors:
        assert (path.resolve(), "resources/models") in datas, f"{path.name} is not bundled"
    examples = sorted((ROOT / "resources" / "examples").glob("digit-*.png"))
    assert examples
    for path in examples:
        assert (path.resolve(), "resources/examples") in datas
    assert (ROOT / "resources" / "icons" / "bayescope-256.png").resolve() in {src for src, _ in datas}


def test_spec_takes_its_data_and_trims_from_bundle_module():
    text = (PACKAGING / "bayescope.spec").read_text()
    tree = ast.parse(text)  # the spec is Python: it must at least parse
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "bundle.resource_datas" in calls
    assert "bundle.apply_trims" in calls
    assert "excludes=list(bundle.EXCLUDED_MODULES)" in text
    assert "launch.py" in text


def test_spec_collects_every_app_and_core_module():
    # The CLI finds its reproduce targets, and the method registry each method's module, with
    # importlib: the import scan alone misses them.
    from core.engine.inference import METHODS

    text = (PACKAGING / "bayescope.spec").read_text()
    assert 'collect_submodules("app")' in text and 'collect_submodules("core")' in text
    assert all(method.module.startswith("core.") for method in METHODS.values())
    # ... which it can only do with the checkout on its path.
    assert text.index("sys.path.insert(0, str(ROOT))") < text.index('collect_submodules("app")')


def test_build_takes_its_sources_from_git_only():
    text = (PACKAGING / "build-linux.sh").read_text()
    assert "git_ archive" in text
    assert 'cd "$src"' in text
    assert "ls-files --others -- resources/models" in text


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_build_refuses_untracked_posteriors(tmp_path):
    repo = tmp_path / "repo"
    (repo / "packaging").mkdir(parents=True)
    (repo / "resources" / "models").mkdir(parents=True)
    shutil.copy(PACKAGING / "build-linux.sh", repo / "packaging" / "build-linux.sh")
    (repo / "resources" / "models" / "mnist_ok.pt").write_bytes(b"tracked")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "x")
    (repo / "resources" / "models" / "face_tmp.pt").write_bytes(b"stray")
    result = subprocess.run(["bash", "packaging/build-linux.sh"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "resources/models/face_tmp.pt" in result.stderr and "not track" in result.stderr
    assert not (repo / "build").exists()


@pytest.mark.skipif(not (shutil.which("strip") and shutil.which("readelf")), reason="needs binutils")
def test_strip_keeps_libraries_loadable_and_leaves_vendored_ones(tmp_path):
    strip_libraries = _load("bayescope_packaging_strip", PACKAGING / "strip_libraries.py")
    # Any extension module with a static symbol table will do; find one in this environment.
    import glob

    found = None
    for pattern in ("kiwisolver/*.so", "yaml/*.so", "PIL/_imaging*.so", "numpy/_core/_multiarray_tests*.so"):
        for site in sys.path:
            for path in glob.glob(os.path.join(site, pattern)):
                if strip_libraries.has_symtab(Path(path)):
                    found = Path(path)
                    break
            if found:
                break
        if found:
            break
    if found is None:
        pytest.skip("no extension module with a symbol table here")
    app = tmp_path / "app"
    ours = app / "_internal" / "pkg" / found.name
    vendored = app / "_internal" / "pkg.libs" / found.name
    for dest in (ours, vendored):
        dest.parent.mkdir(parents=True)
        shutil.copy(found, dest)
    saved, restored, _loaded = strip_libraries.strip_folder(app)
    assert restored == []
    assert saved[strip_libraries.OTHER][0] == 1
    assert ours.stat().st_size < found.stat().st_size
    assert not strip_libraries.has_symtab(ours)
    assert vendored.read_bytes() == found.read_bytes()
    assert str(ours) in strip_libraries.loadable([ours]) or str(ours) not in strip_libraries.loadable([found])


def test_torchvision_is_kept_out(bundle):
    assert "torchvision" in bundle.EXCLUDED_MODULES


def test_ray_is_kept_out(bundle):
    # the 'cluster' extra serves the command line's --cluster; the window never imports it
    # (an import-linter contract), so the installer must not carry its ~80 MB either
    assert "ray" in bundle.EXCLUDED_MODULES


def test_trims_drop_unused_files_and_keep_what_the_app_loads(bundle, tmp_path):
    def entry(dest: str, size: int = 10) -> tuple[str, str, str]:
        src = tmp_path / dest.replace("/", "_")
        src.write_bytes(b"x" * size)
        return (dest, str(src), "DATA")

    needed = [
        "resources/models/network_lenet5_mc_dropout.pt",
        "torch/lib/libtorch_cpu.so",
        "torch/lib/libc10.so",
        "torch/lib/libgomp.so.1",
        "torch/bin/torch_shm_manager",
        "PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so",
        "PySide6/Qt/lib/libQt6Widgets.so.6",
        "PySide6/Qt/plugins/platforms/libqxcb.so",
        "PySide6/Qt/plugins/platforms/libqwayland.so",
        "PySide6/Qt/plugins/platforms/libqoffscreen.so",
        "PySide6/Qt/plugins/imageformats/libqjpeg.so",
        "PySide6/Qt/plugins/xcbglintegrations/libqxcb-glx-integration.so",
        "PySide6/plugins/platforms/qwindows.dll",
        "matplotlib/mpl-data/fonts/ttf/DejaVuSans.ttf",
        "torch/nn/functional.py",
        "torch/distributed/config.py",
        "torch/_inductor/config.py",
        "torch/_dynamo/config.py",
    ]
    unused = {
        "torch/include/ATen/ATen.h": "torch C++ headers and build files",
        "torch/bin/protoc": "torch test libraries and tools",
        "torch/lib/libtorchbind_test.so": "torch test libraries and tools",
        "PySide6/Qt/translations/qt_de.qm": "Qt translations",
        "PySide6/Qt/plugins/sqldrivers/libqsqlite.so": "unused Qt plugins",
        "PySide6/Qt/plugins/printsupport/libcupsprintersupport.so": "unused Qt plugins",
        "PySide6/Qt/lib/libQt6Quick.so.6": "Qt Quick, QML, PDF, Network and EGLFS libraries",
        "PySide6/Qt/lib/libQt6Network.so.6": "Qt Quick, QML, PDF, Network and EGLFS libraries",
        "PySide6/Qt/lib/libQt6EglFSDeviceIntegration.so.6": "Qt Quick, QML, PDF, Network and EGLFS libraries",
        "torch/_dynamo/eval_frame.py": "torch sources of parts bayescope never runs",
        "PySide6/Qt/plugins/platformthemes/libqgtk3.so": "unused Qt plugins",
        "matplotlib/mpl-data/sample_data/goog.npz": "matplotlib sample data",
        "numpy/_core/tests/test_api.py": "Python test folders",
        "torch/_inductor/codegen/cpp.py": "torch sources of parts bayescope never runs",
        "torch/distributed/tensor/_api.py": "torch sources of parts bayescope never runs",
    }
    entries = [entry(d) for d in needed] + [entry(d, size=100) for d in unused]
    kept, removed, report = bundle.apply_trims(entries)
    assert sorted(e[0] for e in kept) == sorted(needed)
    assert sorted(e[0] for e in removed) == sorted(unused)
    for dest, trim in unused.items():
        assert report[trim][0] >= 1, f"{dest} should be removed by {trim!r}"
    assert sum(count for count, _ in report.values()) == len(unused)
    assert sum(size for _, size in report.values()) == 100 * len(unused)


def test_a_link_to_a_trimmed_library_goes_with_it(bundle, tmp_path):
    # PyInstaller links libraries in package folders into the top level; the 0.1.0 folder kept
    # the link libQt6Network.so.6 -> PySide6/Qt/lib/libQt6Network.so.6 after trimming its target.
    library = tmp_path / "libQt6Core.so.6"
    library.write_bytes(b"x" * 10)
    entries = [
        ("PySide6/Qt/lib/libQt6Core.so.6", str(library), "BINARY"),
        ("PySide6/Qt/lib/libQt6Network.so.6", str(library), "BINARY"),
        ("libQt6Core.so.6", "PySide6/Qt/lib/libQt6Core.so.6", "SYMLINK"),
        ("libQt6Network.so.6", "PySide6/Qt/lib/libQt6Network.so.6", "SYMLINK"),
        ("PySide6/Qt/plugins/libqeglfs-link.so", "../lib/libQt6EglFSDeviceIntegration.so.6", "SYMLINK"),
    ]
    kept, removed, report = bundle.apply_trims(entries)
    assert [e[0] for e in kept] == ["PySide6/Qt/lib/libQt6Core.so.6", "libQt6Core.so.6"]
    assert {e[0] for e in removed} == {"PySide6/Qt/lib/libQt6Network.so.6", "libQt6Network.so.6",
                                       "PySide6/Qt/plugins/libqeglfs-link.so"}
    assert report["Qt Quick, QML, PDF, Network and EGLFS libraries"] == [2, 10]  # links weigh nothing
    assert report["unused Qt plugins"] == [1, 0]


def test_libraries_only_trimmed_plugins_needed_are_dropped_too(bundle):
    # ldd-style closures: each binary lists everything it loads, directly or not.
    imports = {
        "/w/libqgtk3.so": ["libgtk-3.so.0", "libcairo.so.2", "libpixman-1.so.0", "libglib-2.0.so.0"],
        "/w/libqxcb.so": ["libxcb.so.1", "libglib-2.0.so.0"],
        "/w/libcairo.so.2": ["libpixman-1.so.0", "libglib-2.0.so.0"],
        "/w/_imaging.so": ["libjpeg.so.62"],
    }
    kept = [("PySide6/Qt/plugins/platforms/libqxcb.so", "/w/libqxcb.so", "BINARY"),
            ("PIL/_imaging.so", "/w/_imaging.so", "EXTENSION"),
            ("libcairo.so.2", "/w/libcairo.so.2", "BINARY"),
            ("libpixman-1.so.0", "/w/libpixman-1.so.0", "BINARY"),
            ("libglib-2.0.so.0", "/w/libglib-2.0.so.0", "BINARY"),
            ("libjpeg.so.62", "/w/libjpeg.so.62", "BINARY"),
            ("libxcb.so.1", "/w/libxcb.so.1", "BINARY")]
    removed = [("PySide6/Qt/plugins/platformthemes/libqgtk3.so", "/w/libqgtk3.so", "BINARY")]
    orphans = bundle.orphaned_libraries(kept, removed, lambda path: imports.get(path, []))
    # cairo and pixman load each other but only the GTK theme needed them; glib is Qt's too.
    assert orphans == {"libcairo.so.2", "libpixman-1.so.0"}


def test_launcher_picks_the_program_by_its_name(monkeypatch, capsys):
    launch = _load("bayescope_packaging_launch", PACKAGING / "launch.py")
    monkeypatch.setattr(sys, "argv", ["/opt/bayescope/bayescope-cli", "methods"])
    assert launch.main() == 0
    assert "sghmc" in capsys.readouterr().out


# ------------------------------------------------------------------ the portable archive


def _tiny_app(folder: Path) -> Path:
    """A folder shaped like the frozen app: a program, a link to it, a library and its link."""
    (folder / "_internal" / "PySide6").mkdir(parents=True)
    program = folder / "bayescope"
    program.write_text("#!/bin/sh\necho \"$(basename \"$0\") $*\"\n")
    program.chmod(0o755)
    (folder / "bayescope-cli").symlink_to("bayescope")
    (folder / "_internal" / "PySide6" / "libQt6Core.so.6").write_bytes(b"\x7fELF")
    (folder / "_internal" / "libQt6Core.so.6").symlink_to("PySide6/libQt6Core.so.6")
    return folder


@pytest.mark.skipif(not shutil.which("tar"), reason="needs tar")
def test_portable_archive_keeps_its_links_pointing_inside(tmp_path):
    # The 0.1.0 archive was packed with --transform "s,^bayescope,bayescope-0.1.0,", which also
    # rewrote the link bayescope-cli -> bayescope into bayescope-cli -> bayescope-0.1.0: a link
    # to nothing. pack-portable.sh is the script build-linux.sh packs with.
    app = _tiny_app(tmp_path / "dist" / "bayescope")
    archive = tmp_path / "out.tar.gz"
    subprocess.run(["bash", str(PACKAGING / "pack-portable.sh"), str(app), "bayescope-0.1.0", str(archive)],
                   check=True, capture_output=True, text=True, timeout=60)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(unpacked)], check=True)
    assert [p.name for p in unpacked.iterdir()] == ["bayescope-0.1.0"]
    folder = unpacked / "bayescope-0.1.0"
    links = [p for p in folder.rglob("*") if p.is_symlink()]
    assert len(links) == 2
    for link in links:
        assert link.exists(), f"{link.name} -> {os.readlink(link)} points at nothing"
    assert os.readlink(folder / "bayescope-cli") == "bayescope"
    result = subprocess.run([str(folder / "bayescope-cli"), "--help"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "bayescope-cli --help"
    assert not list((tmp_path / "dist").glob(".pack-portable.*")), "the scratch folder was left behind"
    with tarfile.open(archive) as tar:
        assert {member.uid for member in tar.getmembers()} == {0}


def test_build_checks_the_archive_as_shipped():
    text = (PACKAGING / "build-linux.sh").read_text()
    assert "--transform" not in text
    assert 'bash packaging/pack-portable.sh "$app"' in text
    # extracted into a scratch folder, its links checked, its programs run from there
    section = text[text.index("3. the portable archive"):text.index("4. the Debian package")]
    assert 'tar -xzf "$tarball"' in section
    assert "-xtype l" in section
    assert '"$shipped/bayescope-cli" --help' in section
    assert '"$shipped/bayescope" --self-test' in section
    assert "settings_untouched" in section
    # the app folder itself is checked for links to nothing right after it is made
    assert text.index("-xtype l") < text.index("strip_libraries.py")


# ------------------------------------------------------------------ what the package needs


@pytest.mark.skipif(not shutil.which("objdump"), reason="needs binutils")
def test_glibc_minimum_counts_every_elf_file_not_only_libraries(tmp_path):
    elf_needs = _load("bayescope_packaging_elf_needs", PACKAGING / "elf_needs.py")
    program = Path(shutil.which("true")).resolve()
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(program, app / "bayescope")  # a program: no ".so" in its name
    (app / "notes.txt").write_text("not ELF")
    needed = elf_needs.version_references(program)
    glibc = max((v for refs in needed.values() for family, v in refs if family == "GLIBC"), key=elf_needs._key)
    found = elf_needs.minimum_versions(app)
    assert found["GLIBC"] == (glibc, "bayescope")
    # a library the folder bundles is its own, not the system's
    for library in needed:
        (app / library).write_bytes(b"bundled")
    assert "GLIBC" not in elf_needs.minimum_versions(app)


def test_deb_depends_on_the_measured_glibc():
    text = (PACKAGING / "linux" / "control.in").read_text()
    assert re.search(r"^Depends: libc6 \(>= @GLIBC@\)", text, re.M)
    script = (PACKAGING / "build-linux.sh").read_text()
    assert 'packaging/elf_needs.py "$app"' in script
    assert "-name '*.so*'" not in script


# ------------------------------------------------------------------ the Debian package's metadata


@pytest.fixture(scope="module")
def debian():
    return _load("bayescope_packaging_debian", PACKAGING / "debian.py")


def test_maintainer_a_release_must_name_a_real_one(debian):
    real = "bayescope maintainers <maintainers@bayescope.org>"
    assert debian.maintainer({"BAYESCOPE_MAINTAINER": real, "BAYESCOPE_RELEASE": "1"}) == real
    for placeholder in ("", "bayescope developers <bayescope@example.invalid>", "me <me@localhost>",
                        "x <x@example.com>", "no address", "<a@b.org>"):
        with pytest.raises(debian.MaintainerError, match="BAYESCOPE_MAINTAINER"):
            debian.maintainer({"BAYESCOPE_MAINTAINER": placeholder, "BAYESCOPE_RELEASE": "1"})
        # a local build says it is unreleased instead
        assert debian.maintainer({"BAYESCOPE_MAINTAINER": placeholder}) == debian.UNRELEASED_MAINTAINER
    assert "unreleased" in debian.UNRELEASED_MAINTAINER
    assert "Maintainer: @MAINTAINER@\n" in (PACKAGING / "linux" / "control.in").read_text()  # no address of its own


def test_release_build_stops_before_building_without_a_maintainer(debian):
    result = subprocess.run([sys.executable, str(PACKAGING / "debian.py"), "maintainer"], capture_output=True,
                            text=True, env={**os.environ, "BAYESCOPE_RELEASE": "1", "BAYESCOPE_MAINTAINER": ""})
    assert result.returncode == 1 and "A release build needs" in result.stderr
    script = (PACKAGING / "build-linux.sh").read_text()
    assert script.index("debian.py\" maintainer") < script.index("pyinstaller")
    workflow = WORKFLOW.read_text()
    assert "BAYESCOPE_MAINTAINER: ${{ vars.BAYESCOPE_MAINTAINER }}" in workflow


def test_deb_metadata_control_md5sums_changelog(debian, tmp_path):
    stage = tmp_path / "stage"
    (stage / "opt" / "bayescope").mkdir(parents=True)
    (stage / "opt" / "bayescope" / "bayescope").write_bytes(b"x" * 3000)
    (stage / "opt" / "bayescope" / "bayescope-cli").symlink_to("bayescope")
    debian.write(stage, "0.1.0", "c38b010a3c71aaaa", 1795000000, "2.36", {})
    control = (stage / "DEBIAN" / "control").read_text()
    assert "Version: 0.1.0\n" in control and "Depends: libc6 (>= 2.36)," in control
    assert f"Maintainer: {debian.UNRELEASED_MAINTAINER}\n" in control
    # dpkg-gencontrol's count: 3 KiB for the program, 1 for the link, 1 per folder
    folders = sum(1 for p in stage.rglob("*") if p.is_dir() and "DEBIAN" not in p.parts)
    assert f"Installed-Size: {3 + 1 + folders + 1}\n" in control  # + the changelog's 1 KiB
    import gzip
    import hashlib

    changelog = stage / "usr" / "share" / "doc" / "bayescope" / "changelog.gz"
    text = gzip.decompress(changelog.read_bytes()).decode()
    assert text.startswith("bayescope (0.1.0) UNRELEASED; urgency=low\n")
    assert "c38b010a3c71" in text and f" -- {debian.UNRELEASED_MAINTAINER}  " in text
    md5sums = (stage / "DEBIAN" / "md5sums").read_text().splitlines()
    assert md5sums == sorted([
        f"{hashlib.md5(b'x' * 3000).hexdigest()}  opt/bayescope/bayescope",
        f"{hashlib.md5(changelog.read_bytes()).hexdigest()}  usr/share/doc/bayescope/changelog.gz",
    ], key=lambda line: line[34:])
    release = {"BAYESCOPE_RELEASE": "1", "BAYESCOPE_MAINTAINER": "A B <a@b.org>"}
    assert debian.changelog("0.1.0", "c" * 40, 0, release).startswith("bayescope (0.1.0) unstable; urgency=medium")


@pytest.mark.skipif(not (shutil.which("dpkg-deb") and shutil.which("lintian")), reason="needs dpkg-deb and lintian")
def test_deb_metadata_satisfies_lintian(debian, tmp_path):
    # The tags the 0.1.0 package had: no md5sums, no changelog, a placeholder maintainer.
    stage = tmp_path / "stage"
    (stage / "opt" / "bayescope").mkdir(parents=True)
    (stage / "opt" / "bayescope" / "bayescope").write_text("#!/bin/sh\n")
    (stage / "usr" / "share" / "doc" / "bayescope").mkdir(parents=True)
    shutil.copy(PACKAGING / "linux" / "copyright", stage / "usr" / "share" / "doc" / "bayescope" / "copyright")
    (stage / "usr" / "share" / "lintian" / "overrides").mkdir(parents=True)
    shutil.copy(PACKAGING / "linux" / "lintian-overrides", stage / "usr" / "share" / "lintian" / "overrides" / "bayescope")
    for path in [stage, *stage.rglob("*")]:
        path.chmod(0o755 if path.is_dir() or path.name == "bayescope" and path.parent.name == "bayescope" else 0o644)
    release = {"BAYESCOPE_RELEASE": "1", "BAYESCOPE_MAINTAINER": "bayescope maintainers <maintainers@bayescope.org>"}
    debian.write(stage, "0.1.0", "c" * 40, 1795000000, "2.36", release)
    deb = tmp_path / "bayescope_0.1.0_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(stage), str(deb)], check=True, capture_output=True)
    found = subprocess.run(["lintian", "--tag-display-limit", "0", str(deb)], capture_output=True, text=True).stdout
    for tag in ("md5sums-lacks-file", "no-md5sums-control-file", "no-changelog", "changelog-file-missing",
                "wrong-name-for-changelog", "maintainer-address", "dir-or-file-in-opt", "copyright-without-copyright-notice"):
        assert tag not in found, found


# ------------------------------------------------------------------ the install test and the size gate


def test_install_test_refuses_to_remove_an_installed_bayescope():
    text = (PACKAGING / "build-linux.sh").read_text()
    assert "dpkg -r bayescope" in text
    # no removal of one already installed: the build stops, with what to do, before any work
    assert "if dpkg -s bayescope >/dev/null 2>&1; then dpkg -r bayescope" not in text
    refusal = text.index("the install test would remove it")
    assert refusal < text.index("git_ archive")
    assert "--no-install-test" in text[refusal:refusal + 400]


def test_build_with_a_bayescope_installed_stops_before_any_work(tmp_path):
    # The 0.1.0 build ran `dpkg -r bayescope` on whatever was installed, and never put it back.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"id": "echo 0", "dpkg-query": "echo 'install ok installed 0.0.9'"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "packaging" / "build-linux.sh"
    script.parent.mkdir()
    shutil.copy(PACKAGING / "build-linux.sh", script)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "bayescope 0.0.9 is installed on this machine" in result.stderr
    assert "--no-install-test" in result.stderr
    assert not (tmp_path / "build").exists()
    with_flag = subprocess.run(["bash", str(script), "--no-install-test"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
    assert "is installed on this machine" not in with_flag.stderr  # (it stops later: no git checkout)


def test_install_and_archive_checks_keep_a_persons_settings():
    text = (PACKAGING / "build-linux.sh").read_text()
    assert text.count('settings_untouched "$home"') == 2
    assert 'as_person "$home" /usr/bin/bayescope --self-test' in text


def test_deb_size_gate_is_the_last_release_plus_a_margin(bundle):
    measured, commit = bundle.DEB_SIZE_MEASURED
    assert 0 < bundle.DEB_SIZE_MARGIN <= 0.05
    assert bundle.deb_size_gate() == int(measured * (1 + bundle.DEB_SIZE_MARGIN))
    assert re.fullmatch(r"[0-9a-f]{7,40}", commit)
    text = (PACKAGING / "build-linux.sh").read_text()
    assert "packaging/bundle.py deb-gate" in text and "200000000" not in text


# ------------------------------------------------------------------ Linux desktop integration


def test_desktop_entry_and_icons():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(PACKAGING / "linux" / "bayescope.desktop")
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application"
    assert desktop["Exec"].split()[0] == "bayescope"
    assert desktop["Icon"] == "bayescope"
    assert desktop["Terminal"] == "false"
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        with Image.open(ROOT / "resources" / "icons" / f"bayescope-{size}.png") as icon:
            assert icon.size == (size, size)
            assert icon.mode == "RGBA"
    with Image.open(ROOT / "resources" / "icons" / "bayescope.ico") as ico:
        assert (256, 256) in ico.info["sizes"] and (16, 16) in ico.info["sizes"]


def test_deb_control_template_has_the_fields_dpkg_needs():
    text = (PACKAGING / "linux" / "control.in").read_text()
    fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", text, re.M))
    for name in ("Package", "Version", "Architecture", "Maintainer", "Installed-Size", "Depends", "Description"):
        assert name in fields, name
    assert fields["Package"] == "bayescope"


# ------------------------------------------------------------------ the release workflow


def parse_yaml(text: str):
    """Parse YAML with PyYAML when it is installed, else with :func:`parse_yaml_subset`."""
    try:
        import yaml
    except ImportError:
        return parse_yaml_subset(text)
    return yaml.safe_load(text)


class YamlSubsetError(ValueError):
    pass


def parse_yaml_subset(text: str):
    """A strict parser for the block YAML a workflow uses: mappings, sequences, ``|`` blocks,
    quoted and plain scalars, one-line ``[a, b]`` lists. Anything else raises."""
    lines: list[list] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError(f"line {number}: tab in indentation")
        lines.append([len(raw) - len(raw.lstrip(" ")), raw.strip(), number, raw])

    def strip_comment(s: str) -> str:
        quote = None
        for i, ch in enumerate(s):
            if quote:
                quote = None if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch == "#" and (i == 0 or s[i - 1] == " "):
                return s[:i].rstrip()
        return s  # an unclosed quote is caught by scalar() where it matters

    items = [[ind, strip_comment(s), n, raw] for ind, s, n, raw in lines if s and not s.startswith("#")]
    pos = 0

    def scalar(s: str):
        if s.startswith('"'):
            if not s.endswith('"') or len(s) < 2:
                raise YamlSubsetError(f"bad quoted string {s!r}")
            return s[1:-1].replace('\\"', '"')
        if s.startswith("'"):
            if not s.endswith("'") or len(s) < 2:
                raise YamlSubsetError(f"bad quoted string {s!r}")
            return s[1:-1].replace("''", "'")
        if s.startswith("["):
            if not s.endswith("]") or "[" in s[1:-1]:
                raise YamlSubsetError(f"bad flow list {s!r}")
            return [scalar(part.strip()) for part in s[1:-1].split(",") if part.strip()]
        if s.startswith(("{", "&", "*", "!", "%", "@", "`")):
            raise YamlSubsetError(f"unsupported YAML in {s!r}")
        return {"true": True, "false": False}.get(s, s)

    def split_key(s: str, number: int):
        match = re.match(r"^([A-Za-z0-9_.${}\- ]+?|\"[^\"]+\"):(?: (.*)|)$", s)
        if not match:
            raise YamlSubsetError(f"line {number}: expected 'key: value', got {s!r}")
        return match.group(1).strip('"'), (match.group(2) or "").strip()

    def block(indent: int):
        nonlocal pos
        if pos < len(items) and (items[pos][1] == "-" or items[pos][1].startswith("- ")):
            return sequence(indent)
        return mapping(indent)

    def value_after_key(rest: str, indent: int):
        if rest:
            return scalar(rest)
        if pos < len(items) and items[pos][0] > indent:
            return block(items[pos][0])
        if pos < len(items) and items[pos][0] == indent and items[pos][1].startswith("- "):
            return sequence(indent)
        return None

    def mapping(indent: int) -> dict:
        nonlocal pos
        out: dict = {}
        while pos < len(items) and items[pos][0] == indent and not items[pos][1].startswith("- "):
            _, s, number, _ = items[pos]
            key, rest = split_key(s, number)
            if key in out:
                raise YamlSubsetError(f"line {number}: duplicate key {key!r}")
            pos += 1
            if rest in ("|", "|-", ">", ">-"):
                # A block scalar: every deeper line, as written (comment lines are left out).
                body_lines = []
                body_indent = items[pos][0] if pos < len(items) else 0
                while pos < len(items) and items[pos][0] > indent:
                    if items[pos][0] < body_indent:
                        raise YamlSubsetError(f"line {items[pos][2]}: block text less indented than its first line")
                    body_lines.append(items[pos][3][body_indent:])
                    pos += 1
                out[key] = "\n".join(body_lines)
            else:
                out[key] = value_after_key(rest, indent)
        if pos < len(items) and items[pos][0] > indent:
            raise YamlSubsetError(f"line {items[pos][2]}: unexpected indentation")
        return out

    def sequence(indent: int) -> list:
        nonlocal pos
        out = []
        while pos < len(items) and items[pos][0] == indent and (items[pos][1] == "-" or items[pos][1].startswith("- ")):
            _, s, number, raw = items[pos]
            rest = s[1:].strip()
            if not rest:
                pos += 1
                out.append(block(items[pos][0]) if pos < len(items) and items[pos][0] > indent else None)
            elif re.match(r"^[A-Za-z0-9_.\-]+:( |$)", rest):
                # "- key: value" opens a mapping whose keys line up with "key".
                items[pos] = [indent + 2, rest, number, raw]
                out.append(mapping(indent + 2))
            else:
                pos += 1
                out.append(scalar(rest))
        return out

    if not items:
        return None
    result = block(items[0][0])
    if pos != len(items):
        raise YamlSubsetError(f"line {items[pos][2]}: could not parse {items[pos][1]!r}")
    return result


def test_yaml_subset_parser_reads_a_workflow_and_rejects_broken_ones():
    text = 'on:\n  push:\n    tags: ["v*"]\njobs:\n  a:\n    steps:\n      - uses: x@v1\n        with:\n          k: "1"\n      - run: |\n          echo hi  # not a comment\n          echo there\n'
    assert parse_yaml_subset(text) == {
        "on": {"push": {"tags": ["v*"]}},
        "jobs": {"a": {"steps": [{"uses": "x@v1", "with": {"k": "1"}}, {"run": "echo hi  # not a comment\necho there"}]}},
    }
    for broken in ("a:\n  b: 1\n   c: 2\n", "a: 1\na: 2\n", "a:\n\t- b\n", 'a: "open\n', "a:\n  - b\n  c: 1\n"):
        with pytest.raises(YamlSubsetError):
            parse_yaml_subset(broken)


def test_release_workflow_builds_three_platforms_with_the_same_spec():
    workflow = parse_yaml(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # PyYAML reads the key `on` as True
    assert triggers["push"]["tags"] == ["v*"]
    jobs = workflow["jobs"]
    assert set(jobs) >= {"linux", "windows", "macos", "release"}
    assert set(jobs["release"]["needs"]) == {"linux", "windows", "macos"}

    def commands(job: str) -> str:
        return "\n".join(step.get("run", "") for step in jobs[job]["steps"])

    assert "packaging/build-linux.sh" in commands("linux")
    assert "packaging/bayescope.spec" in (PACKAGING / "build-linux.sh").read_text()
    for job in ("windows", "macos"):
        assert "pyinstaller" in commands(job) and "packaging/bayescope.spec" in commands(job)
        assert "--self-test" in commands(job)
    assert "bayescope.iss" in commands("windows")
    assert "make-dmg.sh" in commands("macos")
    # The Inno Setup script packs the folder the workflow's PyInstaller step writes.
    iss = (PACKAGING / "windows" / "bayescope.iss").read_text()
    assert "--distpath build/windows/dist" in commands("windows")
    assert r"build\windows\dist\bayescope\*" in iss


def test_macos_minimum_and_the_installers_not_yet_built_are_said_as_they_are():
    # torch 2.13 and dlib-bin publish macOS wheels for macOS 14 on arm64 only.
    spec = (PACKAGING / "bayescope.spec").read_text()
    assert '"LSMinimumSystemVersion": "14.0"' in spec
    install = (ROOT / "docs" / "install.md").read_text()
    for_everyone = install[:install.index("## For developers")]
    assert "macOS 12" not in install and "macOS 14" in for_everyone and "Apple silicon" in for_everyone
    # right-click -> Open no longer opens an unsigned app from macOS 15 on
    assert "Privacy &\nSecurity" in for_everyone or "Privacy & Security" in for_everyone
    assert "Open Anyway" in for_everyone
    # Until a run of the release workflow has built and self-tested them, there is no download.
    download = for_everyone[for_everyone.index("### 1. Download"):for_everyone.index("### 2. Install")]
    rows = {line.split("|")[1].strip(): line for line in download.splitlines() if line.startswith("| ")}
    windows = next(line for name, line in rows.items() if name.startswith("Windows"))
    macos = next(line for name, line in rows.items() if name.startswith("macOS"))
    for row in (windows, macos):
        assert "not yet available" in row and ".exe" not in row and ".dmg" not in row


# ------------------------------------------------------------------ the self-test


def test_self_test_passes_from_the_source_tree(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(tmp_path), QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "app", "--self-test"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600,
    )
    lines = result.stdout.splitlines()
    checks = [line for line in lines if line.startswith(("ok   ", "FAIL "))]
    failures = [line for line in checks if line.startswith("FAIL")]
    assert result.returncode == 0, "\n".join(failures) or result.stderr[-2000:]
    from core.engine.resources import bundled_face_posteriors, bundled_posteriors

    posteriors = bundled_posteriors()  # the digit posteriors
    faces = bundled_face_posteriors()
    # One load and one prediction line per digit posterior, one face description, one line
    # per face head, the descriptors from worker processes, and the window.
    assert len(checks) == 2 * len(posteriors) + 1 + len(faces) + 1 + 1, lines
    assert any("main window" in line for line in checks)
    assert any("describe a face" in line for line in checks)
    assert any("face descriptors in worker processes" in line for line in checks)
    assert lines[-1].startswith("self-test passed")
