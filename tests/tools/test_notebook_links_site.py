"""The README's "Read the course online" line, written by tools/notebook_links.py from the
one setting (pyproject.toml's [project.urls] Repository), like the Colab badges: the GitHub
Pages address while the course has a public address, "not yet" while it has none."""

from pathlib import Path

from tools import notebook_links as links

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = links.Repository("Course-Owner", "mha-course")


def site_lines(text):
    return [line for line in text.splitlines() if links.SITE_LINE.match(line)]


def test_unpublished_the_readme_says_not_yet_and_links_nowhere():
    readme = (ROOT / "README.md").read_text()
    assert links.repository() is None  # this copy of the course has no public address
    assert site_lines(readme) == [links.UNPUBLISHED_SITE]
    assert "github.io" not in readme
    assert links.main(["--site"]) == 0


def test_published_the_readme_links_the_github_pages_address():
    readme = links.readme_text((ROOT / "README.md").read_text(), PUBLISHED)
    url = "https://course-owner.github.io/mha-course/"
    assert site_lines(readme) == [links.site_line(PUBLISHED)]
    assert f"[{url}]({url})" in site_lines(readme)[0]
    # Idempotent, and unpublishing restores the README exactly.
    assert links.readme_text(readme, PUBLISHED) == readme
    assert links.readme_text(readme, None) == (ROOT / "README.md").read_text()


def test_the_pages_address_of_a_user_site_is_the_host_itself():
    assert links.Repository("someone", "Someone.github.io").pages == "https://someone.github.io/"
    assert links.Repository("a", "b").pages == "https://a.github.io/b/"


def test_a_readme_without_the_line_gets_it_above_the_table():
    text = "# Course\n\nIntro.\n\n| # | notebook | what you leave with | Colab |\n"
    shown = links.readme_text(text, None)
    assert shown == (
        "# Course\n\nIntro.\n\n"
        + links.UNPUBLISHED_SITE
        + "\n\n"
        + links.UNPUBLISHED_README_COLAB
        + "\n\n"
        "| # | notebook | what you leave with |\n"  # no Colab column while unpublished
    )


def test_the_site_address_is_printed_for_the_deploy_workflow(capsys, monkeypatch):
    monkeypatch.setattr(links, "repository", lambda: PUBLISHED)
    assert links.main(["--site"]) == 0
    assert capsys.readouterr().out == "https://course-owner.github.io/mha-course/\n"
    monkeypatch.setattr(links, "repository", lambda: None)
    links.main(["--site"])
    assert capsys.readouterr().out == "\n"
