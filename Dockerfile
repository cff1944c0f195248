# stateward: one image for the HTTP service (`stateward serve`) and the workers (`stateward worker`).
# Untested here (no Docker engine on the build machine); see docs/deployment.md.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[serve,postgres]"

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /app stateward \
 && mkdir -p /app /agents && chown stateward /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /app
USER stateward
# The operator's agents: a module on PYTHONPATH named by STATEWARD_AGENTS (mounted at /agents by compose).
ENV PYTHONPATH=/agents \
    PYTHONUNBUFFERED=1
EXPOSE 8080
CMD ["stateward", "serve", "--host", "0.0.0.0", "--port", "8080"]
