"""docker-compose.yml, Dockerfile and .env.example checked against the project they deploy.

Docker cannot run here, so these tests read the files and compare them with what they name: the
`nas` CLI (commands and options parsed by its own click app), pyproject.toml (packages, console
scripts, torch and Python ranges), docs/deploy.md (services, profiles and
commands it documents) and git (`.env` ignored). Compose variables are filled in from
`.env.example`, as `docker compose` would from a copied `.env`.
"""

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from sqlalchemy.engine import make_url

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from nas.cli import app
from nas.cli.dashboard_launch import dashboard_launch

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SHELL_SEPARATORS = {"&&", "||", ";", "|"}


# ---------------------------------------------------------------- readers


def env_example() -> dict[str, str]:
    """KEY=VALUE lines of .env.example (comments and blank lines skipped)."""
    pairs = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=VALUE: {line!r}"
            pairs[key.strip()] = value.strip()
    return pairs


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}; `$$` is a literal `$`."""

    def value(match: re.Match) -> str:
        name, op, default = match.groups()
        if name in env and (env[name] or op not in (":-", ":?")):
            return env[name]
        if op in (":-", "-"):
            return default
        raise KeyError(f"compose variable {name} is not set")

    return "$".join(VARIABLE.sub(value, part) for part in text.split("$$"))


def compose_variables(text: str) -> set[str]:
    return {m.group(1) for part in text.split("$$") for m in VARIABLE.finditer(part)}


def compose() -> dict:
    return yaml.safe_load(interpolate(COMPOSE_TEXT, env_example()))


def services() -> dict[str, dict]:
    return compose()["services"]


def command_tokens(service: dict) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def project_image_services() -> dict[str, dict]:
    return {name: s for name, s in services().items() if "build" in s}


def deploy_doc() -> str:
    """docs/deploy.md: how to run a search on a cluster (its commands are checked against the compose file)."""
    return (ROOT / "docs" / "deploy.md").read_text()


def shell_lines(markdown: str) -> list[list[str]]:
    """Each command line of the fenced code blocks, continuation lines joined, as shell tokens."""
    blocks = re.findall(r"^```(?:bash|sh|shell)?\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [tokens for line in lines if (tokens := shlex.split(line, comments=True))]


def nas_invocations(tokens: list[str]) -> list[list[str]]:
    """The argument lists of every `nas SUBCOMMAND ...` in a token list (up to a shell separator)."""
    found = []
    for i, token in enumerate(tokens):
        if token == "nas" and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            rest = tokens[i + 1 :]
            cut = next((j for j, t in enumerate(rest) if t in SHELL_SEPARATORS), len(rest))
            found.append(rest[:cut])
    return found


COMPOSE_VALUE_OPTIONS = {
    "--scale",
    "--profile",
    "-f",
    "--file",
    "--env-file",
    "-p",
    "--project-name",
    "-e",
    "--env",
    "-u",
    "--user",
    "-w",
    "--workdir",
    "--name",
    "--index",
}


def compose_invocation(tokens: list[str]) -> dict | None:
    """`docker compose [--profile P] SUB [options] [services | SERVICE COMMAND...]`, taken apart."""
    if tokens[:2] != ["docker", "compose"]:
        return None
    parsed = {"profiles": [], "services": [], "scaled": [], "subcommand": None, "command": []}
    i = 2
    while i < len(tokens):
        token = tokens[i]
        if token in COMPOSE_VALUE_OPTIONS:
            value = tokens[i + 1]
            if token == "--profile":
                parsed["profiles"].append(value)
            elif token == "--scale":
                parsed["scaled"].append(value.partition("=")[0])
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        if parsed["subcommand"] is None:
            parsed["subcommand"] = token
        else:
            parsed["services"].append(token)
            if parsed["subcommand"] in ("exec", "run"):  # SERVICE COMMAND...
                parsed["command"] = tokens[i + 1 :]
                break
        i += 1
    return parsed


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for line in joined.splitlines()
        if (parts := line.strip().split(None, 1))
    ]


def dockerfile_args() -> dict[str, str]:
    return dict(arg.partition("=")[::2] for kind, arg in dockerfile() if kind == "ARG")


def click_app() -> click.Group:
    return typer.main.get_command(app)


def host_port(entry) -> tuple[str, str, str]:
    """(host_ip, published, target) of one compose `ports` entry (short or long syntax)."""
    if isinstance(entry, dict):
        return str(entry.get("host_ip", "")), str(entry.get("published", "")), str(entry["target"])
    parts = str(entry).split("/")[0].split(":")
    parts = [""] * (3 - len(parts)) + parts
    return parts[0], parts[1], parts[2]


# ---------------------------------------------------------------- .env and secrets


def test_every_compose_variable_is_defined_in_env_example():
    used, defined = compose_variables(COMPOSE_TEXT), set(env_example())
    assert used, "docker-compose.yml uses no ${VAR}: credentials must come from .env"
    assert used <= defined, f"set in .env.example: {sorted(used - defined)}"
    assert {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"} <= defined
    bare = [m.group(0) for part in COMPOSE_TEXT.split("$$") for m in re.finditer(r"\$[A-Za-z_]\w*", part)]
    assert not bare, f"write ${{VAR}}, or $$VAR for the container's shell: {bare}"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_env_is_ignored_by_git_and_the_image_but_the_example_is_not():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False).returncode == 0

    assert ignored(".env"), "add `.env` to .gitignore: real credentials must never be committed"
    assert not ignored(".env.example")
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_the_store_password_travels_in_the_environment_never_a_command_line():
    env = env_example()
    for name, service in services().items():
        assert env["POSTGRES_PASSWORD"] not in " ".join(command_tokens(service)), name
        assert "--storage" not in command_tokens(service), f"{name}: use RESNAS_STORAGE, not --storage"


def test_store_url_names_the_postgres_service_with_the_psycopg_driver():
    env, all_services = env_example(), services()
    users = {name: s for name, s in all_services.items() if "RESNAS_STORAGE" in (s.get("environment") or {})}
    assert {"ray-head", "dashboard"} <= set(users), "the search driver and the dashboard need the store"
    for name, service in users.items():
        url = make_url(service["environment"]["RESNAS_STORAGE"])
        assert url.drivername == "postgresql+psycopg", name
        assert url.host in all_services and all_services[url.host]["image"].startswith("postgres:"), name
        assert (url.username, url.password, url.database, url.port) == (
            env["POSTGRES_USER"],
            env["POSTGRES_PASSWORD"],
            env["POSTGRES_DB"],
            5432,
        ), name
        assert service["depends_on"][url.host]["condition"] == "service_healthy", name
    dependencies = {Requirement(r).name for r in PYPROJECT["project"]["dependencies"]}
    assert "psycopg" in dependencies, "the URL's driver must be a dependency of the project"


# ---------------------------------------------------------------- services


def test_host_ports_are_published_on_127_0_0_1_only():
    published = 0
    for name, service in services().items():
        assert service.get("network_mode") != "host", name
        for entry in service.get("ports", []):
            host_ip, port, _ = host_port(entry)
            assert host_ip == "127.0.0.1" and port, f"{name}: publish {entry!r} as 127.0.0.1:HOST:CONTAINER"
            published += 1
    assert published >= 2  # at least the dashboard and Ray's dashboard


def test_postgres_has_a_health_check_and_a_named_volume():
    spec = compose()
    postgres = spec["services"]["postgres"]
    assert postgres["image"].split(":")[1].split(".")[0] == "15"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    sources = {v.split(":")[0] for v in postgres["volumes"] if v.split(":")[1] == "/var/lib/postgresql/data"}
    assert sources and sources <= set(spec["volumes"]), "the data folder must be a named, declared volume"
    assert set(postgres["environment"]) >= {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}


def ray_option(tokens: list[str], option: str) -> str | None:
    for i, token in enumerate(tokens):
        if token == option:
            return tokens[i + 1]
        if token.startswith(option + "="):
            return token.split("=", 1)[1]
    return None


def workers() -> dict[str, dict]:
    return {name: s for name, s in services().items() if name.startswith("ray-worker")}


def test_workers_join_the_head_and_scale():
    head = services()["ray-head"]
    head_cmd = command_tokens(head)
    assert head_cmd[:2] == ["ray", "start"] and "--head" in head_cmd and "--block" in head_cmd
    head_address = f"ray-head:{ray_option(head_cmd, '--port') or 6379}"
    assert len(workers()) >= 2, "a GPU worker and a CPU fallback"
    for name, worker in workers().items():
        cmd = command_tokens(worker)
        assert cmd[:2] == ["ray", "start"] and "--block" in cmd, name
        assert ray_option(cmd, "--address") == head_address, name
        assert "container_name" not in worker and not worker.get("ports"), f"{name} must scale with --scale"
        assert worker["depends_on"]["ray-head"], name
        assert worker.get("profiles"), f"{name}: GPU and CPU workers are chosen by profile"


def test_every_ray_node_allows_a_multi_node_cluster():
    """`nas` defaults RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER to 0 (a local, loopback-only Ray), with which
    a node cannot join a cluster: the head (where `nas search` runs) and the workers must override it."""
    for name in ("ray-head", *workers()):
        env = services()[name].get("environment") or {}
        assert env.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "1", name


def gpu_devices(service: dict) -> list[dict]:
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def test_gpu_worker_reserves_gpus_and_a_cpu_profile_falls_back():
    gpu = workers()["ray-worker"]
    devices = gpu_devices(gpu)
    assert devices and all(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert all(("count" in d) != ("device_ids" in d) for d in devices)  # the spec: one of them
    cpu_workers = [s for s in workers().values() if not gpu_devices(s)]
    assert cpu_workers and all("cpu" in s["profiles"] for s in cpu_workers)
    assert all(
        "--num-gpus=0" in command_tokens(s) or ray_option(command_tokens(s), "--num-gpus") == "0" for s in cpu_workers
    )


def shared_ray_mounts() -> set[tuple[str, str]]:
    """(volume, container path) mounts common to the head and every worker."""
    mounts = [
        {tuple(v.split(":")[:2]) for v in services()[name].get("volumes", [])} for name in ["ray-head", *workers()]
    ]
    return set.intersection(*mounts)


def test_head_and_workers_share_one_named_volume_for_tune_storage():
    spec = compose()
    shared = {(volume, path) for volume, path in shared_ray_mounts() if volume in spec["volumes"]}
    assert len(shared) == 1, f"one named volume, same path on every Ray node: {shared}"


def test_dashboard_service_listens_inside_its_container_and_is_published_on_loopback():
    dashboard = services()["dashboard"]
    [invocation] = nas_invocations(command_tokens(dashboard))
    assert invocation[0] == "dashboard"
    [entry] = dashboard["ports"]
    _, _, target = host_port(entry)
    assert ray_option(invocation, "--address") == "0.0.0.0" and ray_option(invocation, "--port") == target
    assert "RESNAS_STORAGE" in dashboard["environment"]


# ---------------------------------------------------------------- commands against the CLI


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, nas arguments) for every `nas ...` in the compose file and docs/deploy.md."""
    found = [
        (f"docker-compose.yml {name}", args)
        for name, s in services().items()
        for args in nas_invocations(command_tokens(s))
    ]
    found += [("docs/deploy.md", args) for tokens in shell_lines(deploy_doc()) for args in nas_invocations(tokens)]
    return found


def test_every_nas_command_parses_with_the_real_cli():
    commands, cli = documented_commands(), click_app()
    assert {args[0] for _, args in commands} >= {"search", "dashboard"}
    for where, args in commands:
        command = cli.commands.get(args[0])
        assert command is not None, f"{where}: no command `nas {args[0]}`"
        try:
            command.make_context(f"nas {args[0]}", list(args[1:]))  # parses and validates, runs nothing
        except click.ClickException as err:
            pytest.fail(f"{where}: `nas {' '.join(args)}`: {err.format_message()}")


def test_every_ray_start_parses_with_the_installed_ray_cli():
    from ray.scripts.scripts import cli as ray_cli

    lines = [command_tokens(s) for s in services().values()] + shell_lines(deploy_doc())
    starts = [
        tokens[i + 2 :] for tokens in lines for i in range(len(tokens) - 1) if tokens[i : i + 2] == ["ray", "start"]
    ]
    assert len(starts) >= 4  # head and workers in the compose file, head and worker in docs/deploy.md
    for args in starts:
        try:
            ray_cli.commands["start"].make_context("ray start", list(args))  # parses, starts nothing
        except click.ClickException as err:
            pytest.fail(f"`ray start {' '.join(args)}`: {err.format_message()}")


def test_cluster_options_exist_and_the_dashboard_listens_on_loopback_by_default():
    cli = click_app()
    search_opts = {o for p in cli.commands["search"].params for o in p.opts}
    assert {"--ray-address", "--ray-dir", "--gpus-per-trial", "--storage"} <= search_opts
    address = {p.name: p for p in cli.commands["dashboard"].params}["address"]
    assert address.default == "127.0.0.1"


def readme_compose_invocations() -> list[dict]:
    return [c for tokens in shell_lines(deploy_doc()) if (c := compose_invocation(tokens))]


def test_readme_names_only_real_services_and_profiles_and_documents_them_all():
    all_services, invocations = services(), readme_compose_invocations()
    assert invocations, "docs/deploy.md shows no `docker compose` command"
    profiles = {p for s in all_services.values() for p in s.get("profiles", [])}
    for call in invocations:
        assert set(call["services"] + call["scaled"]) <= set(all_services), f"unknown service in {call}"
        assert set(call["profiles"]) <= profiles, f"unknown profile in {call}"
    named = {s for call in invocations for s in call["services"] + call["scaled"]}
    section = deploy_doc()
    missing = [s for s in all_services if s not in named and f"`{s}`" not in section]
    assert not missing, f"document these services in docs/deploy.md: {missing}"
    scaled = {s for call in invocations if call["subcommand"] == "up" for s in call["scaled"]}
    assert scaled and scaled <= set(workers()), "show how to scale the Ray workers with --scale"


def test_readme_search_in_compose_uses_the_head_and_the_shared_tune_storage():
    head_cmd = command_tokens(services()["ray-head"])
    head_address = f"ray-head:{ray_option(head_cmd, '--port') or 6379}"
    [(_, shared_path)] = shared_ray_mounts()
    searches = [
        call
        for call in readme_compose_invocations()
        if call["subcommand"] == "exec" and call["command"][:2] == ["nas", "search"]
    ]
    assert searches, "show how to launch a search on the compose cluster"
    for call in searches:
        assert call["services"] == ["ray-head"], "the Ray driver must run on a node of the cluster"
        assert ray_option(call["command"], "--ray-address") in (head_address, "auto")
        assert ray_option(call["command"], "--ray-dir") == shared_path


# ---------------------------------------------------------------- Dockerfile


def test_image_installs_the_project_from_its_sources():
    instructions = dockerfile()
    copied = {
        src.rstrip("/")
        for kind, args in instructions
        if kind == "COPY"
        for src in args.split()[:-1]
        if not src.startswith("--")
    }
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in include}
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"], *packages}
    assert "." in copied or needed <= copied, f"COPY these into the image: {sorted(needed - copied)}"
    runs = " ; ".join(args for kind, args in instructions if kind == "RUN")
    assert re.search(r"\bpip install\b[^;&|]*\s\.(\s|$)", runs), "the image must `pip install .` the project"


def test_image_torch_and_python_are_inside_the_projects_ranges():
    args, instructions = dockerfile_args(), dockerfile()
    torch_range = next(
        Requirement(r).specifier for r in PYPROJECT["project"]["dependencies"] if Requirement(r).name == "torch"
    )
    assert args["TORCH_VERSION"] in torch_range, f"TORCH_VERSION {args['TORCH_VERSION']} outside {torch_range}"
    runs = " ; ".join(a for kind, a in instructions if kind == "RUN")
    assert "torch==${TORCH_VERSION}" in runs and "${TORCH_INDEX_URL}" in runs
    assert args["PYTHON_VERSION"] in SpecifierSet(PYPROJECT["project"]["requires-python"])
    [base] = [a for kind, a in instructions if kind == "FROM"]
    assert "${PYTHON_VERSION}" in base


def test_image_runs_as_a_user_and_its_commands_are_installed_programs():
    instructions = dockerfile()
    users = [args.split(":")[0] for kind, args in instructions if kind == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    assert not [a for kind, a in instructions if kind == "ENTRYPOINT"], "services give the program as their command"
    [cmd] = [json.loads(args) for kind, args in instructions if kind == "CMD"]
    scripts = set(PYPROJECT["project"]["scripts"])
    assert cmd[0] in scripts
    dependencies = {Requirement(r).name for r in PYPROJECT["project"]["dependencies"]}
    for name, service in project_image_services().items():
        program = command_tokens(service)[0]
        assert program in scripts or (program == "ray" and "ray" in dependencies), f"{name}: {program}"
        assert service["build"]["context"] == "."


def test_image_exposes_the_ports_the_services_use():
    exposed = {p.split("/")[0] for kind, args in dockerfile() if kind == "EXPOSE" for p in args.split()}
    head = command_tokens(services()["ray-head"])
    assert (ray_option(head, "--port") or "6379") in exposed
    targets = {host_port(e)[2] for s in project_image_services().values() for e in s.get("ports", [])}
    assert targets <= exposed, f"EXPOSE {sorted(targets - exposed)}"


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith(("#", "!"))]


def excluded(path: str, patterns: list[str]) -> bool:
    """Docker's rule, near enough: a pattern excludes a path or any folder above it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(
        fnmatch.fnmatch(prefix, p) or (p.startswith("**/") and fnmatch.fnmatch(prefix.split("/")[-1], p[3:]))
        for p in patterns
        for prefix in prefixes
    )


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_dockerignore_keeps_secrets_out_and_the_sources_in():
    patterns = dockerignore_patterns()
    assert excluded(".env", patterns) and excluded(".venv/bin/python", patterns)
    copied = [src.rstrip("/") for kind, args in dockerfile() if kind == "COPY" for src in args.split()[:-1]]
    tracked = subprocess.run(
        ["git", "ls-files", *copied], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked
    dropped = [path for path in tracked if excluded(path, patterns)]
    assert not dropped, f".dockerignore drops files the image needs: {dropped[:5]}"


# ---------------------------------------------------------------- the dashboard command the compose file runs


def test_dashboard_takes_the_store_from_the_environment_and_keeps_it_off_argv(monkeypatch):
    url = "postgresql+psycopg://resnas:s3cret-word@postgres:5432/resnas"
    monkeypatch.setenv("RESNAS_STORAGE", url)
    cmd, env = dashboard_launch(None, "0.0.0.0", 8502)
    assert env["RESNAS_STORAGE"] == url and "s3cret-word" not in " ".join(cmd)
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0" and cmd[cmd.index("--server.port") + 1] == "8502"
    _, env = dashboard_launch("sqlite:///other.db", "127.0.0.1", 8501)
    assert env["RESNAS_STORAGE"] == "sqlite:///other.db"  # --storage wins over the environment


@pytest.mark.parametrize(
    "args, field",
    [(["--address", "everywhere"], "--address"), (["--port", "0"], "--port"), (["--port", "70000"], "--port")],
)
def test_bad_dashboard_input_is_one_line_exit_2(args, field, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "nas.cli", "dashboard", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], done.stderr
