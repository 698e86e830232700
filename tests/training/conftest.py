"""Fixtures of the training tests: the world tokenizer and the training problems."""
import pytest


@pytest.fixture(scope="module")
def tok():
    from oar_attrib.training.toy import world_tokenizer

    return world_tokenizer()


@pytest.fixture(scope="module")
def world():
    from models import train_world

    return train_world()
