pytest_plugins = ["pytester"]


def pytest_configure(config):
    # run the plugin under test in its own process, as a user would (torch and engine
    # modules do not survive being imported again and again in one process)
    config.option.runpytest = "subprocess"
