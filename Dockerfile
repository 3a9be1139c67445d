# Two stages: the first builds the wheel from the sources, the second installs only that wheel, so the
# image runs exactly what `pip install` of the package gives (the Lua scripts ship inside it).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gateway ./gateway
COPY lua ./lua
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim
COPY --from=build /dist /dist
RUN pip install --no-cache-dir /dist/*.whl && rm -rf /dist
WORKDIR /app
EXPOSE 9092 6650 8080 8081
ENTRYPOINT ["gateway", "serve"]
