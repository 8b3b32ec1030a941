"""A disk that fills up mid-run (issue 11, family 3): a real, small tmpfs in a private mount
namespace, filled for real with dd after the first record is on it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from adversary import assert_refused, read_jsonl
from frameworks import needs_torch

pytestmark = needs_torch  # its cells import torch, in their own processes


def private_mounts_available() -> str | None:
    """None if `unshare -Urm` can mount a tmpfs here, else why not."""
    if shutil.which("unshare") is None:
        return "needs unshare(1)"
    probe = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot mount a private tmpfs: {probe.stderr.strip()}"
    return None


def test_a_full_disk_keeps_finished_records_and_resume_measures_the_rest(tmp_path, tiny_config):
    reason = private_mounts_available()
    if reason:
        pytest.skip(reason)
    disk = tmp_path / "disk"
    disk.mkdir()
    saved = tmp_path / "saved"
    run = (
        f"{sys.executable} -m mpbench run --config {tiny_config} --framework torch "
        f"--workload mnist_dense --device cpu --policy fp32 --policy bf16 --verbose "
        f"--out {disk}/run"
    )
    # In the namespace: a 4 MiB disk; the run starts; once float32's record is on the disk,
    # dd fills every byte left, so the bf16 record meets ENOSPC. Then what the run left
    # behind is copied out, the filler removed, and the run resumed on the same disk.
    script = f"""
        mount -t tmpfs -o size=4m tmpfs {disk} || exit 99
        {run} >{tmp_path}/first.out 2>{tmp_path}/first.err &
        pid=$!
        for i in $(seq 600); do
            [ -s {disk}/run/results.jsonl ] && break
            sleep 0.2
        done
        dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null
        wait $pid
        echo $? > {tmp_path}/first.rc
        mkdir -p {saved} && cp -r {disk}/run/. {saved}/
        rm {disk}/filler
        {sys.executable} -m mpbench run --out {disk}/run --resume \
            >{tmp_path}/resumed.out 2>{tmp_path}/resumed.err
        echo $? > {tmp_path}/resumed.rc
        cp {disk}/run/results.jsonl {tmp_path}/resumed.jsonl
    """
    done = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr

    def text(name: str) -> str:
        return (tmp_path / name).read_text()

    first = subprocess.CompletedProcess(
        [], int(text("first.rc")), text("first.out"), text("first.err")
    )
    assert_refused(first, "No space left on device", "--resume")
    kept = read_jsonl(saved / "results.jsonl")
    # tmpfs gives a file whole 4 KiB pages: the bf16 record meets ENOSPC unless it fits in
    # the page float32's record left partly empty (a GPU's records are longer), and then
    # results.csv, a new file, is what cannot be written. Either way: one line, --resume.
    policies = [r["policy"] for r in kept]
    if policies == ["float32"]:
        assert "results.jsonl" in first.stderr
    else:
        assert policies == ["float32", "mixed_bfloat16"]
        assert "results.csv" in first.stderr and "2 finished cells are kept" in first.stderr
    assert (saved / "results.jsonl").read_bytes().endswith(b"\n")  # no torn line

    assert int(text("resumed.rc")) == 0, text("resumed.out") + text("resumed.err")
    records = read_jsonl(tmp_path / "resumed.jsonl")
    assert [r["policy"] for r in records] == ["float32", "mixed_bfloat16"]
    assert records[0] == kept[0]
    assert all(r["status"] == "ok" for r in records)


def test_a_csv_that_cannot_be_written_says_what_is_kept_and_how_to_write_it(tmp_path):
    """The second way a full disk shows (above): every record saved, results.csv not."""
    from builders import cpu_run

    from mpbench.runner.loop import _write_csv_if_possible

    records = cpu_run()
    (tmp_path / "results.csv").mkdir()  # a directory where the CSV goes: the rename fails
    (tmp_path / "results.csv" / "x").write_text("")
    error = _write_csv_if_possible(tmp_path, records)
    assert error is not None
    message = str(error)
    assert message.startswith(f"cannot write {tmp_path / 'results.csv'}: ")
    assert f"the {len(records)} finished cells are kept in {tmp_path / 'results.jsonl'}" in message
    assert f"'mpbench run --out {tmp_path} --resume' writes the CSV" in message
