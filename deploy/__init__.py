"""detok's deployment: the image (Dockerfile), the Helm chart (helm/detok), and the Python that
renders the chart offline (`chart`), checks the rendered objects' wiring (`wiring`), and runs the
rendered pods as local processes (`local_pods`). Not part of the wheel."""
