import os
import stat

import pytest

from ratchet.sandbox.workspace import (
    WorkspacePathError,
    clean_path,
    entry,
    make_folder,
    read_bytes,
    remove,
    rename,
    walk,
    write_bytes,
)


@pytest.fixture
def layout(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("SECRET")
    (root / "notes").mkdir()
    (root / "notes" / "a.txt").write_text("hello")
    (root / "file-link").symlink_to(outside / "secret")
    (root / "dir-link").symlink_to(outside)
    return root, outside


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "notes/../../x", "~/x", "C:x", "a\0b"])
def test_paths_that_leave_the_workspace_are_refused(path):
    with pytest.raises(WorkspacePathError):
        clean_path(path)


def test_clean_path_normalises():
    assert clean_path(" ./notes//a.txt ") == "notes/a.txt"
    assert clean_path(".") == "." and clean_path("") == "."


def test_reads_never_follow_a_link(layout):
    root, _ = layout
    assert read_bytes(root, "notes/a.txt", 100) == b"hello"
    for path in ("file-link", "dir-link/secret"):
        with pytest.raises(WorkspacePathError, match="symbolic link"):
            read_bytes(root, path, 100)


def test_folders_are_made_with_their_parents_but_never_through_a_link(layout):
    root, outside = layout
    make_folder(root, "a/b/c")
    make_folder(root, "a/b")  # already there: fine
    assert (root / "a" / "b" / "c").is_dir()
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        make_folder(root, "dir-link/made")
    assert not (outside / "made").exists()


def test_reads_are_bounded_and_refuse_special_files(layout):
    root, _ = layout
    assert read_bytes(root, "notes/a.txt", 2) == b"he"
    os.mkfifo(root / "pipe")
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        read_bytes(root, "pipe", 10)
    with pytest.raises(WorkspacePathError, match="folder"):
        read_bytes(root, "notes", 10)
    with pytest.raises(FileNotFoundError):
        read_bytes(root, "missing", 10)


def test_writes_replace_a_link_instead_of_writing_through_it(layout):
    root, outside = layout
    write_bytes(root, "file-link", b"mine")
    assert (outside / "secret").read_text() == "SECRET"
    assert not (root / "file-link").is_symlink()
    assert (root / "file-link").read_bytes() == b"mine"
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        write_bytes(root, "dir-link/new", b"x")
    assert sorted(os.listdir(outside)) == ["secret"]
    write_bytes(root, "deep/er/new.txt", b"x")
    assert (root / "deep" / "er" / "new.txt").read_bytes() == b"x"


def test_remove_and_rename_act_on_links_not_their_targets(layout):
    root, outside = layout
    rename(root, "file-link", "moved/link")
    assert (root / "moved" / "link").is_symlink()
    remove(root, "moved/link")
    assert (outside / "secret").read_text() == "SECRET"
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        rename(root, "dir-link/secret", "stolen")
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        rename(root, "notes/a.txt", "dir-link/planted")
    with pytest.raises(WorkspacePathError, match="already exists"):
        rename(root, "notes/a.txt", "notes/a.txt")
    assert sorted(os.listdir(outside)) == ["secret"]


def test_walk_lists_links_as_links_and_never_enters_them(layout):
    root, _ = layout
    found = {path: os.path.islink(root / path) for path, _ in walk(root)}
    assert found == {"dir-link": True, "file-link": True, "notes/a.txt": False}
    assert stat.S_ISLNK(entry(root, "file-link").st_mode)
    assert entry(root, "missing") is None
    with pytest.raises(WorkspacePathError, match="symbolic link"):
        list(walk(root, "dir-link"))
