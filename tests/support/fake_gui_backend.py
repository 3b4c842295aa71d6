"""A matplotlib backend that acts like a GUI one, for tests on a headless machine.

``MPLBACKEND=module://fake_gui_backend`` (with this directory on PYTHONPATH).
Its canvas names an interactive framework, as Tk, Qt or macOS canvases do, so
code that asks "can plt.show() open a window?" gets yes; ``plt.show()`` then
"shows" each figure by saving it as ``shown-<number>.png`` in the current
directory, so a test can see which figures a script's ``plt.show()`` displayed.
"""
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg


class FigureManagerFake(FigureManagerBase):
    def show(self) -> None:
        self.canvas.figure.savefig(f"shown-{self.num}.png")

    @classmethod
    def start_main_loop(cls) -> None:  # a real GUI would block here until windows close
        pass


class FigureCanvas(FigureCanvasAgg):
    # "headless" is what matplotlib reports as running on a machine without a
    # display, so switching to this backend passes its framework check there too.
    required_interactive_framework = "headless"
    manager_class = FigureManagerFake
